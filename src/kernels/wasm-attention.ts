import { TandemError } from '../errors/index.js';
import { align } from './wasm-arena.js';
import { checkAttention, checkKvStore } from './checks.js';
import { op } from './wasm-module.js';
import { own, WasmKvCache, type ArenaSlot, type WasmContext } from './wasm-handles.js';
import type { AttentionParams, AttentionRowsParams, KvCache, KvCacheOptions } from './types.js';
import { copyF32 } from './copy.js';
import { rowsIn, rowsOut } from './wasm-rows.js';

/*
 * The KV cache of the wasm/native kernels: K and V of each layer in one arena ([maxSeq,
 * kvHeads, headDim], f32 or f16), stored from the caller's rows and attended to on all
 * threads of the pool.
 */

/**
 * Heads whose scores one native attention item holds at once (ATT_HEADS, attention-jobs.h): a
 * thread's scratch is that many rows of one score per position, each 64-byte aligned.
 */
const ATT_HEADS = 4;

/** Bytes of one thread's attention scratch for contexts up to `len` positions. */
const scoresStride = (len: number): number => ATT_HEADS * align(len * 4, 64);

/** A cache for `options` in the arena `slotFor` hands out for its bytes. */
export function createKvCacheIn(slotFor: (bytes: number) => ArenaSlot, options: KvCacheOptions): KvCache {
  if (options.headDim % 4 !== 0) {
    throw new TandemError('KERNELS_BAD_SHAPE', `head dimension ${options.headDim} is not a multiple of 4`, {
      hint: 'the WebAssembly attention kernel needs headDim % 4 == 0; use --backend reference',
    });
  }
  const es = options.type === 'f16' ? 2 : 4;
  const bytes = options.maxSeq * options.kvHeads * options.headDim * es;
  const k: number[] = [];
  const v: number[] = [];
  const slot = slotFor(2 * options.layers * align(bytes, 64));
  for (let l = 0; l < options.layers; l++) {
    k.push(slot.arena.alloc(bytes));
    v.push(slot.arena.alloc(bytes));
  }
  return new WasmKvCache({ ...options }, slot, k, v);
}

/** Stores n rows of K and V [n, kvHeads * headDim] at positions pos0.. of one layer. */
export function kvStoreRun(
  cache: KvCache,
  layer: number,
  pos0: number,
  k: Float32Array,
  v: Float32Array,
  n: number,
): void {
  const c = own(cache, WasmKvCache, 'KV cache');
  checkKvStore(c.options, layer, pos0, k, v, n);
  const { arena, main } = c.slot;
  const row = c.options.kvHeads * c.options.headDim;
  const len = n * row;
  if (c.options.type === 'f32') {
    copyF32(arena.f32, (c.k[layer]! >>> 2) + pos0 * row, k.subarray(0, len));
    copyF32(arena.f32, (c.v[layer]! >>> 2) + pos0 * row, v.subarray(0, len));
    return;
  }
  const tmp = arena.scratch(len * 4);
  copyF32(arena.f32, tmp >>> 2, k.subarray(0, len));
  main.store_f16!(tmp, c.k[layer]! + pos0 * row * 2, len);
  copyF32(arena.f32, tmp >>> 2, v.subarray(0, len));
  main.store_f16!(tmp, c.v[layer]! + pos0 * row * 2, len);
}

/** Causal grouped-query attention of q [n, heads, headDim] over the cache into out. */
export function attentionRun(
  ctx: WasmContext,
  cache: KvCache,
  q: Float32Array,
  out: Float32Array,
  p: AttentionParams,
): void {
  const c = own(cache, WasmKvCache, 'KV cache');
  checkAttention(c.options, q, out, p);
  const { arena } = c.slot;
  const { kvHeads, headDim } = c.options;
  const len = p.n * p.heads * headDim;
  const stride = scoresStride(p.pos0 + p.n);
  const qBytes = align(len * 4, 64);
  const base = arena.scratch(2 * qBytes + stride * ctx.pool.threads);
  rowsIn(ctx.pool, arena, base, q, 1, len);
  const scale = p.scale ?? 1 / Math.sqrt(headDim);
  const half = c.options.type === 'f16' ? 1 : 0;
  ctx.pool.run(
    arena.index,
    op.attention,
    [
      base,
      c.k[p.layer]!,
      c.v[p.layer]!,
      base + qBytes,
      base + 2 * qBytes,
      stride,
      p.n,
      p.heads,
      kvHeads,
      headDim,
      p.pos0,
      scale,
      half,
    ],
    2 * p.n * p.heads * headDim * (p.pos0 + p.n),
  );
  rowsOut(ctx.pool, arena, base + qBytes, len, out, 1, len);
}

/**
 * Decode rows of several caches (attentionRows): one job over every (row, head) item where the
 * native kernel is built and the caches share one memory and shape, else each row through
 * attentionRun. Either way row t gets the bits of attentionRun at n = 1, pos0 = positions[t].
 */
export function attentionRowsRun(
  ctx: WasmContext,
  caches: readonly KvCache[],
  q: Float32Array,
  out: Float32Array,
  p: AttentionRowsParams,
): void {
  const n = caches.length;
  if (p.positions.length !== n)
    throw new TandemError(
      'KERNELS_BAD_SHAPE',
      `attentionRows: ${p.positions.length} positions for ${n} caches`,
      { hint: 'pass one position per cache' },
    );
  const owned = caches.map((c) => own(c, WasmKvCache, 'KV cache'));
  const first = owned[0];
  if (!first) return;
  const { kvHeads, headDim, type } = first.options;
  const row = p.heads * headDim;
  const rowParams = (t: number): AttentionParams => ({
    layer: p.layer,
    heads: p.heads,
    pos0: p.positions[t] as number,
    n: 1,
    ...(p.scale !== undefined ? { scale: p.scale } : {}),
  });
  const together =
    ctx.nativeNorm &&
    owned.every(
      (c) =>
        c.slot === first.slot &&
        c.options.kvHeads === kvHeads &&
        c.options.headDim === headDim &&
        c.options.type === type,
    );
  if (!together) {
    for (let t = 0; t < n; t++)
      attentionRun(ctx, owned[t] as WasmKvCache, q.subarray(t * row), out.subarray(t * row), rowParams(t));
    return;
  }
  let maxLen = 0;
  let work = 0;
  for (let t = 0; t < n; t++) {
    checkAttention(
      (owned[t] as WasmKvCache).options,
      q.subarray(t * row),
      out.subarray(t * row),
      rowParams(t),
    );
    const len = (p.positions[t] as number) + 1;
    maxLen = Math.max(maxLen, len);
    work += 2 * row * len;
  }
  const { arena } = first.slot;
  const len = n * row;
  const qBytes = align(len * 4, 64);
  const tableBytes = align(n * 12, 64);
  const stride = scoresStride(maxLen);
  const base = arena.scratch(2 * qBytes + tableBytes + stride * ctx.pool.threads);
  const table = base + 2 * qBytes;
  rowsIn(ctx.pool, arena, base, q, 1, len);
  const words = new Uint32Array(arena.memory.buffer, table, 3 * n);
  for (let t = 0; t < n; t++) {
    const c = owned[t] as WasmKvCache;
    words[3 * t] = c.k[p.layer] as number;
    words[3 * t + 1] = c.v[p.layer] as number;
    words[3 * t + 2] = p.positions[t] as number;
  }
  const scale = p.scale ?? 1 / Math.sqrt(headDim);
  ctx.pool.run(
    arena.index,
    op.attention_rows,
    [
      base,
      table,
      base + qBytes,
      table + tableBytes,
      stride,
      n,
      p.heads,
      kvHeads,
      headDim,
      scale,
      type === 'f16' ? 1 : 0,
    ],
    work,
  );
  rowsOut(ctx.pool, arena, base + qBytes, len, out, 1, len);
}
