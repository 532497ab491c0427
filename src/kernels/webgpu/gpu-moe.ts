import assert from 'node:assert/strict';
import type { GpuDevice } from './gpu-device.js';
import type { GpuFfnWeights, GpuMoeWeights } from './gpu-layer-weights.js';
import type { GpuOps, MoeRouting, SlotLists } from './gpu-ops.js';

/** What the MoE FFN needs of a model's shape. */
export interface GpuMoeShape {
  width: number;
  experts: number;
  /** Experts per token. */
  used: number;
  /** Hidden width of one routed expert (a tensor-parallel shard's slice of it). */
  expertFfn: number;
  /** Hidden width of the shared expert (0: none; a shard's slice of it). */
  sharedFfn: number;
  /** Renormalise the top-k weights to sum to 1. */
  norm: boolean;
}

/** The group sum of a partial MoE output, in place: the routed experts' slot outputs, or the shared expert's. */
export type GpuMoeSum = (partial: Float32Array, half: 'experts' | 'shared') => Promise<void>;

/**
 * Runs the held experts on rows grouped by expert (the engine's RunExperts): segment i is
 * expert experts[i] on rows [starts[i], starts[i + 1]) of xs [total, width], outputs into ys.
 */
export interface GpuExpertRunner {
  batch(experts: Int32Array, starts: Int32Array, xs: Float32Array, ys: Float32Array): Promise<void>;
}

/**
 * A batch as this rank routed it: every row [n, width], the share's choices and weights
 * [m, used], and the whole batch's [n, used] (`routing`).
 */
export interface GpuRoutedShare {
  rows: Float32Array;
  ids: Int32Array;
  weights: Float32Array;
  routing: { ids: Int32Array; weights: Float32Array };
}

/**
 * Expert parallel: a group whose ranks hold the routed experts whole. `share` gives this
 * rank's tokens of a batch of n; `exchange` (collective) shares the share's routing, runs
 * this rank's experts on the rows routed to them through `run`, and resolves to the routed
 * experts' output [n, width] of the whole batch, the same on every rank.
 */
export interface GpuExpertExchange {
  share(n: number): { start: number; end: number };
  exchange(layer: number, n: number, share: GpuRoutedShare, run: GpuExpertRunner): Promise<Float32Array>;
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
  private readonly buf: Record<'g' | 'u' | 'h' | 'y' | 'sg' | 'su' | 'sh' | 'sy' | 'xs' | 'held', GPUBuffer>;
  private readonly slots: number;

  constructor(
    private readonly gpu: GpuDevice,
    private readonly ops: GpuOps,
    readonly shape: GpuMoeShape,
    maxTokens: number,
  ) {
    const { experts, used, width, expertFfn, sharedFfn } = shape;
    const slots = (this.slots = maxTokens * used);
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
      // expert parallel: the rows the group sends this rank (at most every slot of a batch), and their lists
      xs: f(slots * width, 'moe rows in'),
      held: f(experts + experts * slots, 'moe held lists'),
    };
  }

  /**
   * out [n, width] = the MoE FFN of xn [n, width] (n <= maxTokens) over every expert held
   * whole, recorded without a read-back. `perRow`: the dense matmuls (router, shared expert)
   * run per row (decode rows), else tiled.
   */
  record(w: GpuMoeWeights, xn: GPUBuffer, out: GPUBuffer, n: number, perRow: boolean): void {
    assert.ok(w.experts.length > 0 && (!w.shared || w.shared.ffn), 'a whole MoE FFN holds every hidden unit');
    this.routed(w, xn, n, perRow);
    this.ops.combine(this.route, this.buf.y, out, n, this.shape.width);
    if (w.shared?.ffn) {
      this.sharedPartial(w.shared.ffn, xn, n, perRow);
      this.ops.sharedGate(xn, w.shared.gateInp, this.buf.sy, out, n, this.shape.width);
    }
  }

  /**
   * `record` on a tensor-parallel shard, whose experts are slices of their hidden units: the
   * slot outputs [n * used, width] and the shared expert's [n, width] are read back (one
   * read), summed across the group by `sum` (the routed experts' first, as the CPU's moeFfn),
   * and written back before the combine and the shared gate. Where the shard holds none of
   * the experts' (or the shared expert's) hidden units, its part of that sum is zeros.
   */
  async recordSummed(
    w: GpuMoeWeights,
    xn: GPUBuffer,
    out: GPUBuffer,
    n: number,
    perRow: boolean,
    sum: GpuMoeSum,
  ): Promise<void> {
    const { used, width } = this.shape;
    const b = this.buf;
    const held = w.experts.length > 0;
    const sharedFfn = w.shared?.ffn;
    this.routed(w, xn, n, perRow);
    if (sharedFfn) this.sharedPartial(sharedFfn, xn, n, perRow);
    const [y, sy] = await this.gpu.readMany([
      { buffer: b.y, bytes: held ? 4 * n * used * width : 0 },
      { buffer: b.sy, bytes: sharedFfn ? 4 * n * width : 0 },
    ]);
    const ys = held ? y! : new Float32Array(n * used * width);
    await sum(ys, 'experts');
    const sys = sharedFfn ? sy! : new Float32Array(n * width);
    if (w.shared) await sum(sys, 'shared');
    // a read flushed what was recorded unless nothing was read: the writes must land after it
    this.gpu.flush();
    this.gpu.write(b.y, ys);
    this.ops.combine(this.route, b.y, out, n, width);
    if (w.shared) {
      this.gpu.write(b.sy, sys);
      this.ops.sharedGate(xn, w.shared.gateInp, b.sy, out, n, width);
    }
  }

  /**
   * The MoE FFN under expert parallel: the router and top-k run on the GPU over the n rows,
   * and one read brings back only what leaves the GPU: the rows and the batch's choices (and
   * the shared expert's partial output). `group.exchange` shares the routing, runs this
   * rank's experts on the rows routed to them (`batch`: one upload, one submission, one read)
   * and returns the routed output [n, width], written into out; the
   * shared expert's sum (`sum`) and sigmoid gate follow, as the CPU's moeFfnDispatched.
   */
  async recordDispatched(
    w: GpuMoeWeights,
    xn: GPUBuffer,
    out: GPUBuffer,
    o: { n: number; perRow: boolean; layer: number; group: GpuExpertExchange; sum: GpuMoeSum },
  ): Promise<void> {
    const { used, width } = this.shape;
    const { n, perRow } = o;
    const b = this.buf;
    const r = this.route;
    const { start, end } = o.group.share(n);
    this.ops.matmul(w.router, xn, r.probs, n, w.router.rows, 0, perRow);
    this.ops.routeTopK(r, n, this.shape.norm);
    const sharedFfn = w.shared?.ffn;
    if (sharedFfn) this.sharedPartial(sharedFfn, xn, n, perRow);
    const [rows, ids, weights, read] = await this.gpu.readMany([
      { buffer: xn, bytes: 4 * n * width },
      { buffer: r.ids, bytes: 4 * n * used },
      { buffer: r.weights, bytes: 4 * n * used },
      { buffer: b.sy, bytes: sharedFfn ? 4 * n * width : 0 },
    ]);
    const sy = sharedFfn ? read! : new Float32Array(n * width);
    const all = { ids: new Int32Array(ids!.buffer), weights: weights! };
    const share = {
      rows: rows!,
      ids: all.ids.subarray(start * used, end * used),
      weights: all.weights.subarray(start * used, end * used),
      routing: all,
    };
    const routed = await o.group.exchange(o.layer, n, share, {
      batch: (experts, starts, xs, ys) => this.batch(w, experts, starts, xs, ys),
    });
    if (w.shared) await o.sum(sy, 'shared');
    // a read flushed what was recorded unless nothing was read: the write must land after it
    this.gpu.flush();
    this.gpu.write(out, routed);
    if (w.shared) {
      this.gpu.write(b.sy, sy);
      this.ops.sharedGate(xn, w.shared.gateInp, b.sy, out, n, width);
    }
  }

  /**
   * Held experts on host rows (expert parallel's receiving side): xs [total, width] grouped by
   * expert, segment i expert experts[i] (a model expert id) on rows [starts[i], starts[i + 1]);
   * the slot lists are written from the host (each row its own slot), the experts recorded
   * as `routed` records them, and their outputs read into ys [total, width].
   */
  private async batch(
    w: GpuMoeWeights,
    experts: Int32Array,
    starts: Int32Array,
    xs: Float32Array,
    ys: Float32Array,
  ): Promise<void> {
    const total = starts[experts.length] as number;
    const held = w.ids.length;
    const lists = new Uint32Array(held + held * total);
    experts.forEach((e, i) => {
      const at = w.ids.indexOf(e);
      assert.ok(at >= 0, `expert ${e} was sent to a GPU shard that does not hold it`);
      const [from, to] = [starts[i] as number, starts[i + 1] as number];
      lists[at] = to - from;
      for (let c = 0; c < to - from; c++) lists[held + at * total + c] = from + c;
    });
    const b = this.buf;
    this.gpu.flush();
    this.gpu.write(b.xs, xs.subarray(0, total * this.shape.width));
    this.gpu.write(b.held, lists);
    const route: SlotLists = { lists: b.held, experts: held, used: 1 };
    this.listed(w.experts, 'gate', b.xs, b.g, total, 1, route);
    this.listed(w.experts, 'up', b.xs, b.u, total, 1, route);
    this.ops.swiglu(b.g, b.u, b.h, total * this.shape.expertFfn);
    this.listed(w.experts, 'down', b.h, b.y, total, 1, route);
    ys.set(await this.gpu.read(b.y, 4 * total * this.shape.width));
  }

  /** The router, top-k and every held expert over its slots: the slot outputs [n * used, width] in y. */
  private routed(w: GpuMoeWeights, xn: GPUBuffer, n: number, perRow: boolean): void {
    const { used, expertFfn, norm } = this.shape;
    const ops = this.ops;
    const b = this.buf;
    const r = this.route;
    ops.matmul(w.router, xn, r.probs, n, w.router.rows, 0, perRow);
    ops.routeTopK(r, n, norm);
    this.listed(w.experts, 'gate', xn, b.g, n, used, r);
    this.listed(w.experts, 'up', xn, b.u, n, used, r);
    ops.swiglu(b.g, b.u, b.h, n * used * expertFfn);
    this.listed(w.experts, 'down', b.h, b.y, n, 1, r);
  }

  /** The shared expert's output [n, width] of xn (this shard's slice of its hidden units) into sy. */
  private sharedPartial(s: GpuFfnWeights, xn: GPUBuffer, n: number, perRow: boolean): void {
    const ops = this.ops;
    const b = this.buf;
    ops.matmul(s.gate, xn, b.sg, n, s.gate.rows, 0, perRow);
    ops.matmul(s.up, xn, b.su, n, s.up.rows, 0, perRow);
    ops.swiglu(b.sg, b.su, b.sh, n * s.gate.rows);
    ops.matmul(s.down, b.sh, b.sy, n, this.shape.width, 0, perRow);
  }

  /**
   * One projection of every held expert over its slots in `lists` (expert i of the list is
   * experts[i]); x is prepared once for them all (one tensor, one type). div: `used` where a
   * slot reads its token's row of x [n, cols], 1 where it reads its own [n * used, cols].
   */
  private listed(
    experts: readonly GpuFfnWeights[],
    which: keyof GpuFfnWeights,
    x: GPUBuffer,
    y: GPUBuffer,
    n: number,
    div: number,
    lists: SlotLists,
  ): void {
    if (experts.length === 0) return;
    const first = experts[0]![which];
    const xin = this.ops.prepare(first, x, div === 1 ? n * lists.used : n);
    experts.forEach((e, i) => this.ops.matmulListed(e[which], xin, y, n, i, lists, div));
  }

  destroy(): void {
    for (const b of [this.route.probs, this.route.ids, this.route.weights, this.route.lists]) b.destroy();
    for (const b of Object.values(this.buf)) b.destroy();
  }
}
