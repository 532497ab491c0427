import { TandemError } from '../errors/index.js';
import { align } from './wasm-arena.js';
import { checkAttention, checkKvStore } from './checks.js';
import { op } from './wasm-module.js';
import { own, WasmKvCache, type ArenaSlot, type WasmContext } from './wasm-handles.js';
import type { AttentionParams, KvCache, KvCacheOptions } from './types.js';

/*
 * The KV cache of the wasm/native kernels: K and V of each layer in one arena ([maxSeq,
 * kvHeads, headDim], f32 or f16), stored from the caller's rows and attended to on all
 * threads of the pool.
 */

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
    arena.f32.set(k.subarray(0, len), (c.k[layer]! >>> 2) + pos0 * row);
    arena.f32.set(v.subarray(0, len), (c.v[layer]! >>> 2) + pos0 * row);
    return;
  }
  const tmp = arena.scratch(len * 4);
  arena.f32.set(k.subarray(0, len), tmp >>> 2);
  main.store_f16!(tmp, c.k[layer]! + pos0 * row * 2, len);
  arena.f32.set(v.subarray(0, len), tmp >>> 2);
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
  const stride = align((p.pos0 + p.n) * 4, 64);
  const qBytes = align(len * 4, 64);
  const base = arena.scratch(2 * qBytes + stride * ctx.pool.threads);
  arena.f32.set(q.subarray(0, len), base >>> 2);
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
  out.set(arena.f32.subarray((base + qBytes) >>> 2, ((base + qBytes) >>> 2) + len));
}
