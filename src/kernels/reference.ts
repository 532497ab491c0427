import { TandemError } from '../errors/index.js';
import { resolveSlice } from './weight-source.js';
import { dequantRow, quantizeFor, rowDot } from './ref/quant-ref.js';
import { attentionRef, rmsNormRef, ropeRef, softmaxRef, swigluRef } from './ref/ops-ref.js';
import { checkAttention, checkKvStore, checkMatmul } from './checks.js';
import type {
  AttentionParams,
  GgmlTypeId,
  Kernels,
  KvCache,
  KvCacheOptions,
  RopeParams,
  Weight,
  WeightSource,
} from './types.js';
import { roundF16 } from './half.js';

class RefWeight implements Weight {
  constructor(
    readonly type: GgmlTypeId,
    readonly rows: number,
    readonly cols: number,
    readonly name: string,
    /** rows * rowBytes ggml bytes, the kept slice only. */
    readonly data: Uint8Array,
    readonly rowBytes: number,
  ) {}
}

class RefKvCache implements KvCache {
  readonly k: Float32Array[];
  readonly v: Float32Array[];
  constructor(readonly options: Readonly<KvCacheOptions>) {
    const size = options.maxSeq * options.kvHeads * options.headDim;
    this.k = Array.from({ length: options.layers }, () => new Float32Array(size));
    this.v = Array.from({ length: options.layers }, () => new Float32Array(size));
  }
}

function own<T>(x: unknown, cls: new (...args: never[]) => T, what: string): T {
  if (!(x instanceof cls)) {
    throw new TandemError('KERNELS_BAD_SHAPE', `${what} was not created by this kernels instance`, {
      hint: 'use handles from the same Kernels object',
    });
  }
  return x;
}

/** The plain TypeScript reference twin: the truth the fast kernels are tested against. */
export class ReferenceKernels implements Kernels {
  readonly backend = 'reference' as const;
  readonly threads = 1;
  private readonly scratch = new Int32Array(256);

  uploadWeight(source: WeightSource): Weight {
    const s = resolveSlice(source);
    const data = new Uint8Array(s.rows * s.rowBytes);
    for (let r = 0; r < s.rows; r++)
      data.set(s.data.subarray(s.rowOffset(r), s.rowOffset(r) + s.rowBytes), r * s.rowBytes);
    return new RefWeight(s.type, s.rows, s.cols, s.name, data, s.rowBytes);
  }

  matvec(w: Weight, x: Float32Array, y: Float32Array): void {
    this.matmul(w, x, y, 1);
  }

  // x: [n, cols], y: [n, rows]
  matmul(weight: Weight, x: Float32Array, y: Float32Array, n: number): void {
    const w = own(weight, RefWeight, 'weight');
    checkMatmul(w, x, y, n);
    for (let t = 0; t < n; t++) {
      const xq = quantizeFor(w.type, x, t * w.cols, w.cols);
      for (let r = 0; r < w.rows; r++)
        y[t * w.rows + r] = rowDot(w.type, w.data, r * w.rowBytes, w.cols, xq, this.scratch);
    }
  }

  embedRow(weight: Weight, row: number, out: Float32Array): void {
    const w = own(weight, RefWeight, 'weight');
    if (!(row >= 0 && row < w.rows)) {
      throw new TandemError('KERNELS_BAD_SHAPE', `${w.name}: row ${row} is outside 0..${w.rows - 1}`, {
        hint: 'pass a token id below the vocabulary size',
      });
    }
    dequantRow(w.type, w.data, row * w.rowBytes, w.cols, out);
  }

  rmsNorm(x: Float32Array, weight: Float32Array, eps: number, out: Float32Array, n: number): void {
    rmsNormRef(x, weight, eps, out, n);
  }

  rope(x: Float32Array, positions: Int32Array, heads: number, params: RopeParams): void {
    ropeRef(x, positions, heads, params);
  }

  softmax(x: Float32Array, n: number, len: number): void {
    softmaxRef(x, n, len);
  }

  swiglu(gate: Float32Array, up: Float32Array, out: Float32Array): void {
    swigluRef(gate, up, out);
  }

  createKvCache(options: KvCacheOptions): KvCache {
    return new RefKvCache({ ...options });
  }

  kvStore(cache: KvCache, layer: number, pos0: number, k: Float32Array, v: Float32Array, n: number): void {
    const c = own(cache, RefKvCache, 'KV cache');
    checkKvStore(c.options, layer, pos0, k, v, n);
    const o = pos0 * c.options.kvHeads * c.options.headDim;
    const len = n * c.options.kvHeads * c.options.headDim;
    const kd = c.k[layer] as Float32Array;
    const vd = c.v[layer] as Float32Array;
    for (let i = 0; i < len; i++) {
      kd[o + i] = c.options.type === 'f16' ? roundF16(k[i] as number) : (k[i] as number);
      vd[o + i] = c.options.type === 'f16' ? roundF16(v[i] as number) : (v[i] as number);
    }
  }

  attention(cache: KvCache, q: Float32Array, out: Float32Array, p: AttentionParams): void {
    const c = own(cache, RefKvCache, 'KV cache');
    checkAttention(c.options, q, out, p);
    const { kvHeads, headDim } = c.options;
    const scale = p.scale ?? 1 / Math.sqrt(headDim);
    attentionRef(q, c.k[p.layer] as Float32Array, c.v[p.layer] as Float32Array, out, {
      n: p.n,
      heads: p.heads,
      kvHeads,
      hd: headDim,
      pos0: p.pos0,
      scale,
      f16: c.options.type === 'f16',
    });
  }

  async close(): Promise<void> {}
}
