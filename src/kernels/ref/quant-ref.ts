import { GgmlType, type GgmlTypeId } from '../types.js';
import { bf16ToF32, f16ToF32, f32ToBf16, f32ToF16, roundEven } from '../half.js';

/**
 * Plain TypeScript truth for ggml's block formats: dequantisation of a row, the activation
 * quantisations llama.cpp uses before a dot product (q8_0, q8_K), and the per-block integer
 * dot products. Slow and readable; the WebAssembly kernels are tested against it.
 */

const f16At = (b: Uint8Array, o: number): number => f16ToF32((b[o] as number) | ((b[o + 1] as number) << 8));
const i8 = (v: number): number => (v << 24) >> 24;

/** Q4_K / Q5_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes at `o`. */
export function scaleMinK4(b: Uint8Array, o: number, j: number): [number, number] {
  if (j < 4) return [(b[o + j] as number) & 63, (b[o + j + 4] as number) & 63];
  const sc = ((b[o + j + 4] as number) & 0xf) | (((b[o + j - 4] as number) >> 6) << 4);
  const m = ((b[o + j + 4] as number) >> 4) | (((b[o + j] as number) >> 6) << 4);
  return [sc, m];
}

/** Integer quants of one 256-element K-quant super-block at `o`, in element order. */
export function kQuants(type: GgmlTypeId, b: Uint8Array, o: number, q: Int32Array): void {
  if (type === GgmlType.Q6_K) {
    // ql[128] qh[64] scales[16] d: 128-element halves, four 32-element groups each.
    for (let n = 0; n < 2; n++) {
      const ql = o + 64 * n;
      const qh = o + 128 + 32 * n;
      for (let l = 0; l < 32; l++) {
        const h = b[qh + l] as number;
        const a = b[ql + l] as number;
        const c = b[ql + l + 32] as number;
        q[128 * n + l] = ((a & 0xf) | ((h & 3) << 4)) - 32;
        q[128 * n + l + 32] = ((c & 0xf) | (((h >> 2) & 3) << 4)) - 32;
        q[128 * n + l + 64] = ((a >> 4) | (((h >> 4) & 3) << 4)) - 32;
        q[128 * n + l + 96] = ((c >> 4) | (((h >> 6) & 3) << 4)) - 32;
      }
    }
    return;
  }
  // Q4_K: d dmin scales[12] qs[128]; Q5_K adds qh[32] before qs.
  const five = type === GgmlType.Q5_K;
  const qs = o + (five ? 48 : 16);
  for (let j = 0; j < 4; j++) {
    for (let l = 0; l < 32; l++) {
      const v = b[qs + 32 * j + l] as number;
      let lo = v & 0xf;
      let hi = v >> 4;
      if (five) {
        const h = b[o + 16 + l] as number;
        lo += (h >> (2 * j)) & 1 ? 16 : 0;
        hi += (h >> (2 * j + 1)) & 1 ? 16 : 0;
      }
      q[64 * j + l] = lo;
      q[64 * j + 32 + l] = hi;
    }
  }
}

/** Dequantises `cols` elements of the row starting at byte `o` into out[outOffset...]. */
export function dequantRow(
  type: GgmlTypeId,
  b: Uint8Array,
  o: number,
  cols: number,
  out: Float32Array,
  outOffset = 0,
): void {
  switch (type) {
    case GgmlType.F32: {
      const dv = new DataView(b.buffer, b.byteOffset + o, cols * 4);
      for (let i = 0; i < cols; i++) out[outOffset + i] = dv.getFloat32(4 * i, true);
      return;
    }
    case GgmlType.F16:
      for (let i = 0; i < cols; i++) out[outOffset + i] = f16At(b, o + 2 * i);
      return;
    case GgmlType.BF16:
      for (let i = 0; i < cols; i++)
        out[outOffset + i] = bf16ToF32((b[o + 2 * i] as number) | ((b[o + 2 * i + 1] as number) << 8));
      return;
    case GgmlType.Q8_0:
      for (let k = 0; k < cols / 32; k++) {
        const bo = o + 34 * k;
        const d = f16At(b, bo);
        for (let i = 0; i < 32; i++) out[outOffset + 32 * k + i] = d * i8(b[bo + 2 + i] as number);
      }
      return;
    case GgmlType.Q4_0:
      for (let k = 0; k < cols / 32; k++) {
        const bo = o + 18 * k;
        const d = f16At(b, bo);
        for (let i = 0; i < 16; i++) {
          const v = b[bo + 2 + i] as number;
          out[outOffset + 32 * k + i] = d * ((v & 0xf) - 8);
          out[outOffset + 32 * k + 16 + i] = d * ((v >> 4) - 8);
        }
      }
      return;
    default: {
      const q = new Int32Array(256);
      const bytes = type === GgmlType.Q6_K ? 210 : type === GgmlType.Q5_K ? 176 : 144;
      for (let k = 0; k < cols / 256; k++) {
        const bo = o + bytes * k;
        kQuants(type, b, bo, q);
        const base = outOffset + 256 * k;
        if (type === GgmlType.Q6_K) {
          const d = f16At(b, bo + 208);
          for (let i = 0; i < 256; i++)
            out[base + i] = Math.fround(d * i8(b[bo + 192 + (i >> 4)] as number)) * (q[i] as number);
        } else {
          const d = f16At(b, bo);
          const dmin = f16At(b, bo + 2);
          for (let j = 0; j < 8; j++) {
            const [sc, m] = scaleMinK4(b, bo + 4, j);
            const d1 = Math.fround(d * sc);
            const m1 = Math.fround(dmin * m);
            for (let i = 0; i < 32; i++)
              out[base + 32 * j + i] = Math.fround(d1 * (q[32 * j + i] as number)) - m1;
          }
        }
      }
    }
  }
}

/** An activation row converted to a weight type's dot type. */
export interface QuantizedX {
  /** Elements as the dot type sees them: f32/f16/bf16-rounded values, or int8 quants. */
  values: Float32Array | Int8Array;
  /** Per-block scales (q8_0: f16-rounded, per 32; q8_K: f32, per 256). */
  d: Float32Array;
}

/** llama.cpp's q8_0 activation quantisation (x86 path: scale 127/amax, round half to even). */
export function quantizeQ8_0(x: Float32Array, offset: number, cols: number): QuantizedX {
  const values = new Int8Array(cols);
  const d = new Float32Array(cols / 32);
  for (let k = 0; k < cols / 32; k++) {
    let amax = 0;
    for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(x[offset + 32 * k + i] as number));
    d[k] = f16ToF32(f32ToF16(amax / 127));
    const id = amax !== 0 ? Math.fround(127 / amax) : 0;
    for (let i = 0; i < 32; i++)
      values[32 * k + i] = roundEven(Math.fround((x[offset + 32 * k + i] as number) * id));
  }
  return { values, d };
}

/** llama.cpp's q8_K activation quantisation (per 256: iscale = -127 / signed max-magnitude). */
export function quantizeQ8K(x: Float32Array, offset: number, cols: number): QuantizedX {
  const values = new Int8Array(cols);
  const d = new Float32Array(cols / 256);
  for (let k = 0; k < cols / 256; k++) {
    let amax = 0;
    let max = 0;
    for (let i = 0; i < 256; i++) {
      const v = x[offset + 256 * k + i] as number;
      if (Math.abs(v) > amax) {
        amax = Math.abs(v);
        max = v;
      }
    }
    if (amax === 0) continue;
    const iscale = Math.fround(-127 / max);
    for (let i = 0; i < 256; i++)
      values[256 * k + i] = Math.min(
        127,
        roundEven(Math.fround(iscale * (x[offset + 256 * k + i] as number))),
      );
    d[k] = Math.fround(1 / iscale);
  }
  return { values, d };
}

/** x converted to the dot type of weight type `type`. */
export function quantizeFor(type: GgmlTypeId, x: Float32Array, offset: number, cols: number): QuantizedX {
  switch (type) {
    case GgmlType.F32:
      return { values: x.slice(offset, offset + cols), d: new Float32Array(0) };
    case GgmlType.F16: {
      const values = new Float32Array(cols);
      for (let i = 0; i < cols; i++) values[i] = f16ToF32(f32ToF16(x[offset + i] as number));
      return { values, d: new Float32Array(0) };
    }
    case GgmlType.BF16: {
      const values = new Float32Array(cols);
      for (let i = 0; i < cols; i++) values[i] = bf16ToF32(f32ToBf16(x[offset + i] as number));
      return { values, d: new Float32Array(0) };
    }
    case GgmlType.Q8_0:
    case GgmlType.Q4_0:
      return quantizeQ8_0(x, offset, cols);
    default:
      return quantizeQ8K(x, offset, cols);
  }
}

/** Dot product of the weight row at byte `o` (cols elements) with x in its dot type. */
export function rowDot(
  type: GgmlTypeId,
  b: Uint8Array,
  o: number,
  cols: number,
  x: QuantizedX,
  scratch: Int32Array,
): number {
  const v = x.values;
  let sum = 0;
  switch (type) {
    case GgmlType.F32:
    case GgmlType.F16:
    case GgmlType.BF16: {
      const w = new Float32Array(cols);
      dequantRow(type, b, o, cols, w);
      for (let i = 0; i < cols; i++) sum += (w[i] as number) * (v[i] as number);
      return sum;
    }
    case GgmlType.Q8_0:
    case GgmlType.Q4_0: {
      const eight = type === GgmlType.Q8_0;
      for (let k = 0; k < cols / 32; k++) {
        const bo = o + (eight ? 34 : 18) * k;
        let sumi = 0;
        for (let i = 0; i < 32; i++) {
          const q = eight
            ? i8(b[bo + 2 + i] as number)
            : i < 16
              ? ((b[bo + 2 + i] as number) & 0xf) - 8
              : ((b[bo + 2 + i - 16] as number) >> 4) - 8;
          sumi += q * (v[32 * k + i] as number);
        }
        sum += sumi * Math.fround(f16At(b, bo) * (x.d[k] as number));
      }
      return sum;
    }
    default: {
      const six = type === GgmlType.Q6_K;
      const bytes = six ? 210 : type === GgmlType.Q5_K ? 176 : 144;
      for (let k = 0; k < cols / 256; k++) {
        const bo = o + bytes * k;
        kQuants(type, b, bo, scratch);
        const dx = x.d[k] as number;
        if (six) {
          let sumi = 0;
          for (let g = 0; g < 16; g++) {
            let s = 0;
            for (let i = 0; i < 16; i++)
              s += (scratch[16 * g + i] as number) * (v[256 * k + 16 * g + i] as number);
            sumi += i8(b[bo + 192 + g] as number) * s;
          }
          sum += Math.fround(f16At(b, bo + 208) * dx) * sumi;
        } else {
          let sumi = 0;
          let summ = 0;
          for (let j = 0; j < 8; j++) {
            const [sc, m] = scaleMinK4(b, bo + 4, j);
            let s = 0;
            let sx = 0;
            for (let i = 0; i < 32; i++) {
              s += (scratch[32 * j + i] as number) * (v[256 * k + 32 * j + i] as number);
              sx += v[256 * k + 32 * j + i] as number;
            }
            sumi += sc * s;
            summ += m * sx;
          }
          sum += Math.fround(f16At(b, bo) * dx) * sumi - Math.fround(f16At(b, bo + 2) * dx) * summ;
        }
      }
      return sum;
    }
  }
}
