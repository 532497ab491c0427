import assert from 'node:assert/strict';
import type { Kernels } from '../../kernels/types.js';
import {
  reduceAcross,
  type ExpertDispatch,
  type ExpertRequest,
  type RunExpert,
  type RunExperts,
  type ShardComm,
} from './comm.js';
import type { ModelConfig } from './config.js';
import { project, projectLeaves, projectParts } from './attention.js';
import type { Scratch } from './scratch.js';
import { leafParts, type FfnWeights, type MoeWeights } from './weights.js';

/**
 * out = down(silu(gate x) * up x) for n tokens. x: [n, width], out: [n, width]. The last
 * `lone` rows get matvec's bits each (see project).
 */
export function swigluFfn(
  k: Kernels,
  w: FfnWeights,
  scratch: Scratch,
  x: Float32Array,
  out: Float32Array,
  n: number,
  tag: string,
  lone = 0,
): void {
  const fused = w.gateUp.fused;
  const mixed = lone > 0 && lone < n;
  if (
    fused &&
    k.matmulSwiglu &&
    fused.parts.length === 2 &&
    fused.parts[0] === fused.parts[1] &&
    (!mixed || k.matmulPlusRows)
  ) {
    // gate and up stacked in one weight: the kernels apply SwiGLU before handing rows back
    const g = scratch.f32(`${tag}.act`, n * (fused.parts[0] as number));
    if (mixed) k.matmulSwiglu(fused.weight, x, g, n - lone, lone);
    else k.matmulSwiglu(fused.weight, x, g, n);
    projectLeaves(k, w.down, g, out, n, scratch, `${tag}.down`, lone);
    return;
  }
  const [g, u] = projectParts(k, w.gateUp, x, n, scratch, tag, lone) as [Float32Array, Float32Array];
  k.swiglu(g, u, g);
  projectLeaves(k, w.down, g, out, n, scratch, `${tag}.down`, lone);
}

/**
 * Top-k routing of one token: softmax over all experts (already applied to `probs`), the k
 * largest (ties to the lower id), their weights renormalised to sum to 1 when `norm`.
 */
export function route(
  probs: Float32Array,
  k: number,
  norm: boolean,
  ids: Int32Array,
  weights: Float32Array,
): void {
  for (let j = 0; j < k; j++) {
    let best = -1;
    let bestP = -Infinity;
    for (let e = 0; e < probs.length; e++) {
      const p = probs[e] as number;
      if (p > bestP && !ids.subarray(0, j).includes(e)) {
        best = e;
        bestP = p;
      }
    }
    ids[j] = best;
    weights[j] = bestP;
  }
  if (norm) {
    let sum = 0;
    for (let j = 0; j < k; j++) sum += weights[j] as number;
    for (let j = 0; j < k; j++) weights[j] = (weights[j] as number) / sum;
  }
}

/** Router probabilities of n tokens x [n, width] and their top-k choices: ids and weights [n, used]. */
function routeTokens(
  k: Kernels,
  c: ModelConfig,
  w: MoeWeights,
  scratch: Scratch,
  x: Float32Array,
  n: number,
): { ids: Int32Array; weights: Float32Array } {
  const experts = c.expertCount;
  const used = c.expertUsedCount;
  const probs = scratch.f32('moe.probs', n * experts);
  project(k, w.router, x, probs, n);
  k.softmax(probs, n, experts);
  const ids = new Int32Array(n * used);
  const weights = new Float32Array(n * used);
  for (let t = 0; t < n; t++) {
    route(
      probs.subarray(t * experts, (t + 1) * experts),
      used,
      c.expertWeightsNorm,
      ids.subarray(t * used, (t + 1) * used),
      weights.subarray(t * used, (t + 1) * used),
    );
  }
  return { ids, weights };
}

/**
 * The mixture-of-experts FFN for n tokens into `out` [n, width], complete on every rank of
 * the group. Every shard routes every token (the router is replicated) and runs every
 * selected expert on the tokens routed to it, over its slice of the experts' hidden units.
 * The group sums each expert's output on each token (from every rank's pieces of the
 * experts' down projection, in the leaf tree when the split follows the leaves: one node's
 * outputs bit for bit), then every rank adds a token's weighted outputs in ascending expert
 * id (combineRouted), as one node does. The shared expert of qwen2moe is added with its
 * sigmoid gate (addSharedExpert). One node: `comm` is singleNodeComm and the sums are no-ops.
 */
export async function moeFfn(
  k: Kernels,
  c: ModelConfig,
  w: MoeWeights,
  scratch: Scratch,
  x: Float32Array,
  out: Float32Array,
  n: number,
  comm: ShardComm,
  onRoute?: (ids: Int32Array) => void,
): Promise<void> {
  const width = c.embeddingLength;
  const used = c.expertUsedCount;
  const { ids, weights } = routeTokens(k, c, w, scratch, x, n);
  onRoute?.(ids);
  // every slot's output [n, used, width], in this shard's pieces of the experts' down projection
  const first = w.experts.values().next().value as FfnWeights | undefined;
  const pieces = first ? leafParts(first.down) : 1;
  const slots = n * used * width;
  const y = scratch.f32('moe.slots', pieces * slots);
  y.fill(0);
  const rows = new Int32Array(n * used);
  for (const [e, ffn] of w.experts) {
    let m = 0;
    for (let s = 0; s < n * used; s++) if (ids[s] === e) rows[m++] = s;
    if (m === 0) continue;
    const xg = scratch.f32('moe.x', m * width);
    for (let r = 0; r < m; r++) {
      const t = ((rows[r] as number) / used) | 0;
      xg.set(x.subarray(t * width, (t + 1) * width), r * width);
    }
    const ye = scratch.f32('moe.y', pieces * m * width);
    swigluFfn(k, ffn, scratch, xg, ye, m, 'moe');
    for (let q = 0; q < pieces; q++) {
      for (let r = 0; r < m; r++) {
        const from = (q * m + r) * width;
        y.set(ye.subarray(from, from + width), q * slots + (rows[r] as number) * width);
      }
    }
  }
  await reduceAcross(comm, y, slots, first?.down);
  out.fill(0);
  combineRouted(out, y, ids, weights, n, used, width);
  if (w.shared) await addSharedExpert(k, w.shared, scratch, x, out, n, width, comm);
}

/**
 * The mixture-of-experts FFN under expert parallel, into `out` [n, width] complete on every
 * rank: the routed experts live whole on the ranks of the group (`layer`: the model layer, whose
 * placement the dispatch follows). This rank routes its share of the tokens, `dispatch` shares
 * every rank's routing, runs this rank's experts on its own copy of their rows and shares the
 * outputs, and every rank combines every token; the shared expert is added as in moeFfn. A
 * token's output is the single-node value bit for bit: the same routing, each expert run on
 * the same rows in the same order, and the weighted outputs added in the same order.
 */
export async function moeFfnDispatched(
  k: Kernels,
  c: ModelConfig,
  w: MoeWeights,
  scratch: Scratch,
  x: Float32Array,
  out: Float32Array,
  n: number,
  dispatch: ExpertDispatch,
  comm: ShardComm,
  onRoute?: (ids: Int32Array) => void,
  layer = 0,
  work?: ExpertWork,
): Promise<void> {
  const width = c.embeddingLength;
  const used = c.expertUsedCount;
  const { start, end } = dispatch.share(n);
  const m = end - start;
  // A rank with tokens routes the whole batch, as one node does, and keeps its share's
  // choices: kernels may round a row differently in a batch of another size (matvec for one
  // token, GEMM tiles for more), and a last-bit change can flip a near-tie between experts.
  // The router costs experts x width per token, under 1% of the experts' work.
  // A small batch (a decode step) may be routed whole on every rank (routesLocally): then no
  // routing travels, and the dispatch checks that every rank's is the same.
  const local = dispatch.routesLocally?.(n) === true;
  const routed =
    m > 0 || local
      ? routeTokens(k, c, w, scratch, x, n)
      : { ids: new Int32Array(0), weights: new Float32Array(0) };
  const ids = routed.ids.subarray(start * used, end * used);
  onRoute?.(ids);
  await dispatchRouted(dispatch, {
    rows: x,
    ids,
    weights: routed.weights.subarray(start * used, end * used),
    ...(local ? { routing: routed } : {}),
    n,
    used,
    width,
    layer,
    out,
    run: (e, rows, o, r) => {
      const ffn = w.experts.get(e);
      assert.ok(ffn, `expert ${e} was dispatched to a rank that does not hold it`);
      const before = work ? process.cpuUsage() : undefined;
      swigluFfn(k, ffn, scratch, rows, o, r, 'moe');
      if (work && before) {
        const spent = process.cpuUsage(before);
        work.cpuMs += (spent.user + spent.system) / 1000;
      }
    },
  });
  if (w.shared) await addSharedExpert(k, w.shared, scratch, x, out, n, width, comm);
}

/**
 * CPU time this process spent running its own experts (every thread's: a product's pool
 * included), in ms since the model was loaded: what a rank's share of the experts costs it,
 * whether or not it had a core to itself.
 */
export interface ExpertWork {
  cpuMs: number;
}

/** A routed batch handed to dispatchRouted: the dispatch's request, and where its output goes. */
export interface RoutedShare extends ExpertRequest {
  /** The model layer (the dispatch follows its placement). */
  layer: number;
  /** Receives the MoE output of the routed experts [n, width], the whole batch's on every rank. */
  out: Float32Array;
  /** Runs this rank's experts on the rows routed to them. */
  run: RunExpert | RunExperts;
}

/**
 * Expert parallel once a rank has routed its share (whatever computed the routing: the CPU's
 * kernels, a GPU): `dispatch` shares the routing and the experts' outputs over the group, and
 * every token is combined into `out` in ascending expert id (combineRouted), on every rank
 * alike: no sum across the group.
 */
export async function dispatchRouted(dispatch: ExpertDispatch, r: RoutedShare): Promise<void> {
  const { n, used, width, out } = r;
  const all = await dispatch.dispatch(r, r.run);
  out.fill(0);
  combineRouted(out.subarray(0, n * width), all.y, all.ids, all.weights, n, used, width, all.at);
}

/**
 * out [m, width] = per token, the sum of weight x output of its experts, added in ascending
 * expert id: the order (and the float expression) of moeFfn, so the sums are bit-identical.
 * y: the output of expert ids[t, j] on token t, at y[at[t * used + j]] (default [m, used,
 * width]: at (t * used + j) * width). A slot without an expert (-1: routing over NaN
 * probabilities) adds nothing, as in moeFfn.
 */
function combineRouted(
  out: Float32Array,
  y: Float32Array,
  ids: Int32Array,
  weights: Float32Array,
  m: number,
  used: number,
  width: number,
  at?: Int32Array,
): void {
  const order = new Int32Array(used);
  for (let t = 0; t < m; t++) {
    const base = t * used;
    // the token's slots by ascending expert id (insertion sort: used is a handful)
    for (let j = 0; j < used; j++) {
      const e = ids[base + j] as number;
      let i = j;
      for (; i > 0 && (ids[base + (order[i - 1] as number)] as number) > e; i--)
        order[i] = order[i - 1] as number;
      order[i] = j;
    }
    const o = t * width;
    for (let q = 0; q < used; q++) {
      const j = order[q] as number;
      if ((ids[base + j] as number) < 0) continue;
      const s = weights[base + j] as number;
      const yo = at ? (at[base + j] as number) : (base + j) * width;
      for (let i = 0; i < width; i++) out[o + i] = (out[o + i] as number) + s * (y[yo + i] as number);
    }
  }
}

/**
 * out += sigmoid(gate . x) * shared(x) per token: the shared expert's output summed across the
 * group first (in the leaf tree from every rank's pieces, when its split follows the leaves),
 * so every rank adds the same values as one node, after the routed experts.
 */
async function addSharedExpert(
  k: Kernels,
  shared: NonNullable<MoeWeights['shared']>,
  scratch: Scratch,
  x: Float32Array,
  out: Float32Array,
  n: number,
  width: number,
  comm: ShardComm,
): Promise<void> {
  const y = scratch.f32('moe.shared', leafParts(shared.down) * n * width);
  swigluFfn(k, shared, scratch, x, y, n, 'moe.shexp');
  await reduceAcross(comm, y, n * width, shared.down);
  for (let t = 0; t < n; t++) {
    let dot = 0;
    for (let i = 0; i < width; i++) dot += (x[t * width + i] as number) * (shared.gate_inp[i] as number);
    const gate = 1 / (1 + Math.exp(-Math.fround(dot)));
    for (let i = 0; i < width; i++)
      out[t * width + i] = (out[t * width + i] as number) + gate * (y[t * width + i] as number);
  }
}
