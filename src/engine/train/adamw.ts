import { referenceOps, type TrainOps } from '../../kernels/backward/train-ops.js';
import { referenceGemm } from '../../kernels/backward/gemm.js';
import type { ParamLayout } from './params.js';

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
    const { beta1, beta2, eps, weightDecay } = this.options;
    this.ops.adamw(weights, grad, this.m, this.v, this.decayMask, {
      lr,
      beta1,
      beta2,
      eps,
      c1: 1 - beta1 ** step,
      c2: 1 - beta2 ** step,
      decay: 1 - lr * weightDecay,
    });
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
