import { referenceOps, type TrainOps } from '../../kernels/backward/train-ops.js';
import { referenceGemm } from '../../kernels/backward/gemm.js';
import type { FlatRange, ParamLayout } from './params.js';

const reference = referenceOps(referenceGemm);

/** AdamW's hyper-parameters (PyTorch's names and defaults except betas, as GPT-2 recipes use). */
export interface AdamWOptions {
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
}

export const ADAMW_DEFAULTS: AdamWOptions = { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 };

/**
 * AdamW as torch.optim.AdamW computes it: decoupled weight decay p *= 1 - lr wd (matrices
 * only; norms are not decayed), then p -= lr m_hat / (sqrt(v_hat) + eps) with bias-corrected
 * moments. Moments live in flat buffers beside the weights (paramLayout's order); `step` is
 * the 1-based update count, kept by the caller (and the checkpoint). The pass runs on `ops`
 * (the native one in C, over all parameters in one call; TypeScript by default).
 */
export class AdamW {
  readonly m: Float32Array;
  readonly v: Float32Array;
  private readonly decayMask: Uint8Array;

  constructor(
    layout: ParamLayout,
    readonly options: AdamWOptions = ADAMW_DEFAULTS,
    moments?: { m: Float32Array; v: Float32Array },
    private readonly ops: TrainOps = reference,
  ) {
    this.m = moments?.m ?? new Float32Array(layout.total);
    this.v = moments?.v ?? new Float32Array(layout.total);
    this.decayMask = new Uint8Array(layout.total);
    for (const e of layout.entries) if (e.decay) this.decayMask.fill(1, e.offset, e.offset + e.size);
  }

  update(weights: Float32Array, grad: Float32Array, lr: number, step: number): void {
    this.updateOwned(weights, grad, lr, step, [[0, weights.length]]);
  }

  /**
   * update() on the `owned` ranges alone (a rank of a split optimizer): each element's update
   * reads only its own weight, gradient and moments, so it equals update()'s on those ranges
   * bit for bit.
   */
  updateOwned(
    weights: Float32Array,
    grad: Float32Array,
    lr: number,
    step: number,
    owned: readonly FlatRange[],
  ): void {
    const { beta1, beta2, eps, weightDecay } = this.options;
    const k = {
      lr,
      beta1,
      beta2,
      eps,
      c1: 1 - beta1 ** step,
      c2: 1 - beta2 ** step,
      decay: 1 - lr * weightDecay,
    };
    const at = <T extends Float32Array | Uint8Array>(x: T, a: number, b: number): T => x.subarray(a, b) as T;
    for (const [a, b] of owned)
      if (b > a)
        this.ops.adamw(
          at(weights, a, b),
          at(grad, a, b),
          at(this.m, a, b),
          at(this.v, a, b),
          at(this.decayMask, a, b),
          k,
        );
  }
}

/**
 * Scales grad so that its L2 norm is at most maxNorm (torch.nn.utils.clip_grad_norm_: factor
 * maxNorm / (norm + 1e-6) when below 1). Returns the norm before clipping.
 */
export function clipGradNorm(grad: Float32Array, maxNorm: number, ops: TrainOps = reference): number {
  const norm = Math.sqrt(ops.sumSquares(grad));
  const factor = maxNorm / (norm + 1e-6);
  if (factor < 1) ops.scale(grad, factor);
  return norm;
}

/**
 * clipGradNorm() for a rank of a split optimizer, which holds the summed gradient on its
 * `owned` ranges only: the squares are summed over those, then over the ranks (`sumRanks`,
 * in rank order, so every rank gets the same norm), and the owned ranges scaled. The norm is
 * the same sum grouped otherwise than clipGradNorm's, so it may differ in its last bits.
 */
export async function clipGradNormOwned(
  grad: Float32Array,
  maxNorm: number,
  owned: readonly FlatRange[],
  sumRanks: (x: number) => Promise<number>,
  ops: TrainOps = reference,
): Promise<number> {
  let squares = 0;
  for (const [a, b] of owned) squares += ops.sumSquares(grad.subarray(a, b));
  const norm = Math.sqrt(await sumRanks(squares));
  const factor = maxNorm / (norm + 1e-6);
  if (factor < 1) for (const [a, b] of owned) ops.scale(grad.subarray(a, b), factor);
  return norm;
}

/** The learning-rate schedule: linear warm-up, then a cosine from peak down to peak * minRatio at `total`. */
export interface Schedule {
  peak: number;
  warmup: number;
  total: number;
  minRatio: number;
}

/** The learning rate of update `step` (0-based). */
export function learningRate(s: Schedule, step: number): number {
  if (step < s.warmup) return (s.peak * (step + 1)) / s.warmup;
  const span = Math.max(1, s.total - s.warmup);
  const progress = Math.min(1, (step - s.warmup) / span);
  const min = s.peak * s.minRatio;
  return min + (s.peak - min) * 0.5 * (1 + Math.cos(Math.PI * progress));
}
