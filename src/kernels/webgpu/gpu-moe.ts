import type { GpuDevice } from './gpu-device.js';
import type { GpuFfnWeights, GpuMoeWeights } from './gpu-layer-weights.js';
import type { GpuOps, MoeRouting } from './gpu-ops.js';

/** What the MoE FFN needs of a model's shape. */
export interface GpuMoeShape {
  width: number;
  experts: number;
  /** Experts per token. */
  used: number;
  /** Hidden width of one routed expert. */
  expertFfn: number;
  /** Hidden width of the shared expert (0: none). */
  sharedFfn: number;
  /** Renormalise the top-k weights to sum to 1. */
  norm: boolean;
}

/**
 * The mixture-of-experts FFN recorded on the GPU for up to `maxTokens` tokens, with no
 * read-back: the router's matmul, softmax and top-k (which also writes each expert's slot
 * list), every expert's gate/up/down matmuls over the slots in its list (an expert with no
 * slot dispatches workgroups that return at once), SwiGLU over all slots, the weighted sum
 * in ascending expert id (as the CPU's combineRouted), then the shared expert with its
 * sigmoid gate (qwen2moe). Numerics: f32 sums as the dense kernels; the CPU path sums the
 * gate dot and the combine in f64, hence tolerances, not bits.
 */
export class GpuMoe {
  private readonly route: MoeRouting;
  private readonly buf: Record<'g' | 'u' | 'h' | 'y' | 'sg' | 'su' | 'sh' | 'sy', GPUBuffer>;

  constructor(
    private readonly gpu: GpuDevice,
    private readonly ops: GpuOps,
    readonly shape: GpuMoeShape,
    maxTokens: number,
  ) {
    const { experts, used, width, expertFfn, sharedFfn } = shape;
    const slots = maxTokens * used;
    this.route = {
      probs: gpu.storage(4 * maxTokens * experts, 'moe probs'),
      ids: gpu.storage(4 * slots, 'moe ids'),
      weights: gpu.storage(4 * slots, 'moe weights'),
      lists: gpu.storage(4 * (experts + experts * maxTokens), 'moe lists'),
      experts,
      used,
    };
    const f = (floats: number, label: string): GPUBuffer => gpu.storage(4 * Math.max(1, floats), label);
    this.buf = {
      g: f(slots * expertFfn, 'moe gate'),
      u: f(slots * expertFfn, 'moe up'),
      h: f(slots * expertFfn, 'moe hidden'),
      y: f(slots * width, 'moe slots'),
      sg: f(maxTokens * sharedFfn, 'shexp gate'),
      su: f(maxTokens * sharedFfn, 'shexp up'),
      sh: f(maxTokens * sharedFfn, 'shexp hidden'),
      sy: f(maxTokens * width, 'shexp out'),
    };
  }

  /**
   * out [n, width] = the MoE FFN of xn [n, width] (n <= maxTokens, n <= 64). `perRow`: the
   * dense matmuls (router, shared expert) run per row (decode rows), else tiled.
   */
  record(w: GpuMoeWeights, xn: GPUBuffer, out: GPUBuffer, n: number, perRow: boolean): void {
    const { used, width, expertFfn, norm } = this.shape;
    const ops = this.ops;
    const b = this.buf;
    const r = this.route;
    ops.matmul(w.router, xn, r.probs, n, w.router.rows, 0, perRow);
    ops.routeTopK(r, n, norm);
    this.listed(w.experts, 'gate', xn, b.g, n, used);
    this.listed(w.experts, 'up', xn, b.u, n, used);
    ops.swiglu(b.g, b.u, b.h, n * used * expertFfn);
    this.listed(w.experts, 'down', b.h, b.y, n, 1);
    ops.combine(r, b.y, out, n, width);
    if (w.shared) {
      const s = w.shared;
      ops.matmul(s.gate, xn, b.sg, n, s.gate.rows, 0, perRow);
      ops.matmul(s.up, xn, b.su, n, s.up.rows, 0, perRow);
      ops.swiglu(b.sg, b.su, b.sh, n * s.gate.rows);
      ops.matmul(s.down, b.sh, b.sy, n, width, 0, perRow);
      ops.sharedGate(xn, s.gateInp, b.sy, out, n, width);
    }
  }

  /** One projection of every expert over its slots; x is prepared once for them all (one tensor, one type). */
  private listed(
    experts: readonly GpuFfnWeights[],
    which: keyof GpuFfnWeights,
    x: GPUBuffer,
    y: GPUBuffer,
    n: number,
    div: number,
  ): void {
    const first = experts[0]![which];
    const xin = this.ops.prepare(first, x, div === 1 ? n * this.shape.used : n);
    experts.forEach((e, i) => this.ops.matmulListed(e[which], xin, y, n, i, this.route, div));
  }

  destroy(): void {
    for (const b of [this.route.probs, this.route.ids, this.route.weights, this.route.lists]) b.destroy();
    for (const b of Object.values(this.buf)) b.destroy();
  }
}
