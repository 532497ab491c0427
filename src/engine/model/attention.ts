import { sumTree, type SumTree } from '../../kernels/reduce-native.js';
import type { Kernels, KvCache, RopeParams, Weight } from '../../kernels/types.js';
import type { ModelConfig } from './config.js';
import { addBias, type Scratch } from './scratch.js';
import { kvHeadsFor, rangeLength, type ShardSpec } from './shard.js';
import type { AttentionWeights, Leaves, Projection } from './weights.js';

/**
 * How this shard's query heads map onto the KV heads it stores. When the query-head range
 * starts and ends on GQA group boundaries the KV heads are stored as they are; otherwise
 * (a tensor-parallel split that cuts a group) each local query head gets its own copy of
 * its KV head, so the kernels' uniform grouping still holds.
 */
export interface HeadLayout {
  heads: number;
  /** KV heads projected by this shard's k/v slices. */
  kvProjected: number;
  /** KV heads stored in the cache (= kvProjected, or = heads when expanded). */
  kvStored: number;
  /** For an expanded layout: local KV index feeding each local query head. */
  expand?: Int32Array;
}

export function headLayout(config: ModelConfig, shard: ShardSpec): HeadLayout {
  const group = config.headCount / config.headCountKv;
  const kv = kvHeadsFor(config, shard.heads);
  const heads = rangeLength(shard.heads);
  const kvProjected = rangeLength(kv);
  if (shard.heads.start % group === 0 && shard.heads.end % group === 0)
    return { heads, kvProjected, kvStored: kvProjected };
  const expand = new Int32Array(heads);
  for (let i = 0; i < heads; i++) expand[i] = Math.floor((shard.heads.start + i) / group) - kv.start;
  return { heads, kvProjected, kvStored: heads, expand };
}

/**
 * y = W x for n tokens, choosing matvec for a single token. The last `lone` of the n rows
 * (other sequences' decode steps riding along a prefill) get matvec's bits each, the first
 * n - lone those of a matmul of n - lone tokens. lone = n: below GEMM_TOKENS rows (the
 * batched decode step), where a matmul gives every row matvec's bits.
 */
export function project(k: Kernels, w: Weight, x: Float32Array, y: Float32Array, n: number, lone = 0): void {
  const p = n - lone;
  if (n === 1) k.matvec(w, x, y);
  else if (lone === 0 || lone === n) k.matmul(w, x, y, n);
  else if (k.matmulPlusRows) k.matmulPlusRows(w, x, y, p, lone);
  else {
    project(k, w, x, y, p);
    const rest = x.subarray(p * w.cols);
    const out = y.subarray(p * w.rows);
    if (k.matvecRows) k.matvecRows(w, rest, out, lone);
    else
      for (let t = 0; t < lone; t++)
        k.matvec(w, rest.subarray(t * w.cols, (t + 1) * w.cols), out.subarray(t * w.rows, (t + 1) * w.rows));
  }
}

/**
 * y = W x for n tokens of a row-parallel projection held as leaves (leaves.ts): each leaf
 * multiplies its run of x's columns and the partial outputs are added in the fixed tree. With
 * a group sum, y receives this shard's pieces [pieces, n, rows] for the group to add (see
 * leafParts); else their sum [n, rows]. The leftmost leaf of each piece writes straight into
 * the piece's place.
 */
export function projectLeaves(
  k: Kernels,
  leaves: Leaves,
  x: Float32Array,
  y: Float32Array,
  n: number,
  scratch: Scratch,
  tag: string,
  lone = 0,
): void {
  const { weights } = leaves;
  const first = weights[0] as Weight;
  if (weights.length === 1) return project(k, first, x, y, n, lone);
  const { roots, first: starts, spares, cols } = leaves.sums;
  const names = scratchNames(tag, weights.length, spares);
  const m = n * first.rows;
  const parts: Float32Array[] = [];
  for (let j = 0; j < weights.length; j++) parts.push(scratch.f32(names.leaf[j] as string, m));
  for (let q = 0; q < roots.length; q++) parts[starts[q] as number] = y.subarray(q * m, (q + 1) * m);
  let at = 0;
  for (let j = 0; j < weights.length; j++) {
    const w = weights[j] as Weight;
    let xj = x.subarray(at, at + w.cols);
    if (n > 1) {
      xj = scratch.f32(names.x, n * w.cols);
      for (let t = 0; t < n; t++) xj.set(x.subarray(t * cols + at, t * cols + at + w.cols), t * w.cols);
    }
    project(k, w, xj, parts[j] as Float32Array, n, lone);
    at += w.cols;
  }
  const spare: Float32Array[] = [];
  for (let d = 0; d < spares; d++) spare.push(scratch.f32(names.tree[d] as string, m));
  for (let q = 0; q < roots.length; q++)
    sumTree(roots[q] as SumTree, parts, parts[starts[q] as number] as Float32Array, spare);
}

const scratchNameCache = new Map<string, { leaf: string[]; tree: string[]; x: string }>();

/** projectLeaves' scratch buffer names for `tag` (made once, not per call). */
function scratchNames(
  tag: string,
  leaves: number,
  spares: number,
): { leaf: string[]; tree: string[]; x: string } {
  let got = scratchNameCache.get(tag);
  if (!got || got.leaf.length < leaves || got.tree.length < spares) {
    got = {
      leaf: Array.from({ length: Math.max(leaves, got?.leaf.length ?? 0) }, (_, j) => `${tag}.${j}`),
      tree: Array.from({ length: Math.max(spares, got?.tree.length ?? 0) }, (_, d) => `${tag}.t${d}`),
      x: `${tag}.x`,
    };
    scratchNameCache.set(tag, got);
  }
  return got;
}

/**
 * Runs a (possibly fused) projection for n tokens and returns each part's output [n, rows_i].
 * For one token the parts are views of the fused output; for several they are de-interleaved
 * from its [n, sum(rows)] rows into scratch buffers.
 */
export function projectParts(
  k: Kernels,
  proj: Projection,
  x: Float32Array,
  n: number,
  scratch: Scratch,
  tag: string,
  lone = 0,
): Float32Array[] {
  if (proj.separate) {
    return proj.separate.map((w, i) => {
      const y = scratch.f32(`${tag}.${i}`, n * w.rows);
      project(k, w, x, y, n, lone);
      return y;
    });
  }
  const { weight, parts } = proj.fused!;
  const total = weight.rows;
  const y = scratch.f32(`${tag}.fused`, n * total);
  project(k, weight, x, y, n, lone);
  const outs: Float32Array[] = [];
  let offset = 0;
  for (const [i, rows] of parts.entries()) {
    if (n === 1) outs.push(y.subarray(offset, offset + rows));
    else {
      const out = scratch.f32(`${tag}.${i}`, n * rows);
      for (let t = 0; t < n; t++)
        out.set(y.subarray(t * total + offset, t * total + offset + rows), t * rows);
      outs.push(out);
    }
    offset += rows;
  }
  return outs;
}

function expandHeads(
  src: Float32Array,
  dst: Float32Array,
  map: Int32Array,
  kvHeads: number,
  hd: number,
  n: number,
): void {
  const heads = map.length;
  for (let t = 0; t < n; t++) {
    for (let h = 0; h < heads; h++) {
      const from = (t * kvHeads + (map[h] as number)) * hd;
      dst.set(src.subarray(from, from + hd), (t * heads + h) * hd);
    }
  }
}

export interface AttentionStep {
  /** Normed input [n, width]. */
  x: Float32Array;
  n: number;
  pos0: number;
  positions: Int32Array;
  cache: KvCache;
  /** Layer index inside the cache (local to the shard). */
  layer: number;
  /**
   * The last rowCaches.length rows are each a decode step of its own sequence (a batched
   * decode step, or decode steps riding along a prefill): row p + t's K/V go to rowCaches[t]
   * at positions[p + t] and it attends to that cache alone. The first p rows are `cache`'s
   * from `pos0` (none in a batched decode step: `cache` and `pos0` are then unused).
   */
  rowCaches?: readonly KvCache[];
  /** Output [n, width]: this shard's partial sum of the attention output projection. */
  out: Float32Array;
}

/** One attention block: q/k/v projections, biases, q/k norms, RoPE, cache store, GQA attention, o projection. */
export function attentionForward(
  k: Kernels,
  c: ModelConfig,
  layout: HeadLayout,
  w: AttentionWeights,
  rope: RopeParams,
  scratch: Scratch,
  step: AttentionStep,
): void {
  const { x, n } = step;
  const hd = c.headDim;
  const lone = step.rowCaches?.length ?? 0;
  const [q, kk, v] = projectParts(k, w.qkv, x, n, scratch, 'attn.qkv', lone) as [
    Float32Array,
    Float32Array,
    Float32Array,
  ];
  if (w.qBias) addBias(q, w.qBias, n);
  if (w.kBias) addBias(kk, w.kBias, n);
  if (w.vBias) addBias(v, w.vBias, n);
  // qwen3: RMSNorm over each head, treating [n, heads, hd] as [n * heads, hd] rows.
  if (w.qNorm) k.rmsNorm(q, w.qNorm, c.rmsEps, q, n * layout.heads);
  if (w.kNorm) k.rmsNorm(kk, w.kNorm, c.rmsEps, kk, n * layout.kvProjected);
  k.rope(q, step.positions, layout.heads, rope);
  k.rope(kk, step.positions, layout.kvProjected, rope);
  let kStore = kk;
  let vStore = v;
  if (layout.expand) {
    kStore = scratch.f32('attn.kx', n * layout.kvStored * hd);
    vStore = scratch.f32('attn.vx', n * layout.kvStored * hd);
    expandHeads(kk, kStore, layout.expand, layout.kvProjected, hd, n);
    expandHeads(v, vStore, layout.expand, layout.kvProjected, hd, n);
  }
  const att = scratch.f32('attn.out', n * layout.heads * hd);
  const scale = Math.fround(1 / Math.fround(Math.sqrt(hd)));
  // one query row per sequence: [kvStored * hd] of K/V and [heads * hd] of q/out per row
  const kvw = layout.kvStored * hd;
  const qw = layout.heads * hd;
  const p = n - lone;
  if (p > 0) {
    k.kvStore(step.cache, step.layer, step.pos0, kStore, vStore, p);
    k.attention(step.cache, q.subarray(0, p * qw), att.subarray(0, p * qw), {
      layer: step.layer,
      heads: layout.heads,
      pos0: step.pos0,
      n: p,
      scale,
    });
  }
  for (let t = p; t < n; t++) {
    k.kvStore(
      step.rowCaches![t - p] as KvCache,
      step.layer,
      step.positions[t] as number,
      kStore.subarray(t * kvw, (t + 1) * kvw),
      vStore.subarray(t * kvw, (t + 1) * kvw),
      1,
    );
  }
  if (lone > 0)
    attendRows(k, step, q.subarray(p * qw, n * qw), att.subarray(p * qw, n * qw), layout.heads, scale);
  projectLeaves(k, w.o, att, step.out, n, scratch, 'attn.o', lone);
}

/**
 * The decode rows' attention (the last rowCaches.length rows of the step), each row against
 * its own cache at its own position: one kernel call where the kernels have attentionRows, else
 * one call a row; the bits are the same either way.
 */
function attendRows(
  k: Kernels,
  step: AttentionStep,
  q: Float32Array,
  out: Float32Array,
  heads: number,
  scale: number,
): void {
  const caches = step.rowCaches as readonly KvCache[];
  const positions = step.positions.subarray(step.n - caches.length, step.n);
  if (k.attentionRows) {
    k.attentionRows(caches, q, out, { layer: step.layer, heads, positions, scale });
    return;
  }
  const qw = q.length / caches.length;
  for (let t = 0; t < caches.length; t++) {
    k.attention(caches[t] as KvCache, q.subarray(t * qw, (t + 1) * qw), out.subarray(t * qw, (t + 1) * qw), {
      layer: step.layer,
      heads,
      pos0: positions[t] as number,
      n: 1,
      scale,
    });
  }
}
