import { TandemError } from '../errors/index.js';
import type { AttentionParams, KvCacheOptions, Weight } from './types.js';

/** Argument checks shared by every backend, so each fails the same way on bad shapes. */

function shape(message: string, hint: string, details: Record<string, unknown>): never {
  throw new TandemError('KERNELS_BAD_SHAPE', message, { hint, details });
}

// x: [n, cols], y: [n, rows]
export function checkMatmul(w: Weight, x: Float32Array, y: Float32Array, n: number): void {
  if (!Number.isInteger(n) || n < 1)
    shape(`matmul with ${w.name}: token count ${n} must be a positive integer`, 'pass n >= 1', { n });
  if (x.length < n * w.cols || y.length < n * w.rows) {
    shape(
      `matmul with ${w.name} [${w.rows}, ${w.cols}]: x has ${x.length} elements (need ${n * w.cols}) and y ${y.length} (need ${n * w.rows})`,
      'size x as [n, cols] and y as [n, rows]',
      { n, rows: w.rows, cols: w.cols, x: x.length, y: y.length },
    );
  }
}

export function checkKvStore(
  o: KvCacheOptions,
  layer: number,
  pos0: number,
  k: Float32Array,
  v: Float32Array,
  n: number,
): void {
  if (!(layer >= 0 && layer < o.layers))
    shape(`KV store: layer ${layer} is outside 0..${o.layers - 1}`, 'pass a layer of this cache', { layer });
  if (pos0 < 0 || pos0 + n > o.maxSeq) {
    throw new TandemError(
      'KERNELS_CONTEXT_FULL',
      `KV store: positions ${pos0}..${pos0 + n - 1} do not fit a context of ${o.maxSeq}`,
      {
        hint: 'shorten the prompt or raise the context length',
        details: { pos0, n, maxSeq: o.maxSeq },
      },
    );
  }
  const need = n * o.kvHeads * o.headDim;
  if (k.length < need || v.length < need)
    shape(
      `KV store: k/v have ${k.length}/${v.length} elements, need ${need}`,
      'size k and v as [n, kvHeads, headDim]',
      { need },
    );
}

export function checkAttention(
  o: KvCacheOptions,
  q: Float32Array,
  out: Float32Array,
  p: AttentionParams,
): void {
  if (!(p.layer >= 0 && p.layer < o.layers))
    shape(`attention: layer ${p.layer} is outside 0..${o.layers - 1}`, 'pass a layer of this cache', {
      layer: p.layer,
    });
  if (p.heads % o.kvHeads !== 0)
    shape(
      `attention: ${p.heads} query heads are not a multiple of ${o.kvHeads} kv heads`,
      'check head counts',
      { heads: p.heads },
    );
  if (p.pos0 < 0 || p.n < 1 || p.pos0 + p.n > o.maxSeq) {
    throw new TandemError(
      'KERNELS_CONTEXT_FULL',
      `attention: positions ${p.pos0}..${p.pos0 + p.n - 1} do not fit a context of ${o.maxSeq}`,
      {
        hint: 'shorten the prompt or raise the context length',
        details: { pos0: p.pos0, n: p.n, maxSeq: o.maxSeq },
      },
    );
  }
  const need = p.n * p.heads * o.headDim;
  if (q.length < need || out.length < need)
    shape(
      `attention: q/out have ${q.length}/${out.length} elements, need ${need}`,
      'size q and out as [n, heads, headDim]',
      { need },
    );
}
