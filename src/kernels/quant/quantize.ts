import { TandemError } from '../../errors/index.js';
import { bf16ToF32, f16Table, f32ToBf16, f32ToF16 } from './half.js';
import { dequantizeQ4_0, quantizeQ4_0 } from './q4-0.js';
import { dequantizeQ4_K, dequantizeQ5_K, quantizeQ4_K, quantizeQ5_K } from './q45-k.js';
import { dequantizeQ6_K, quantizeQ6_K } from './q6-k.js';
import { dequantizeQ8_0, quantizeQ8_0 } from './q8-0.js';
import { GgmlType, byteSize, supportedType } from './types.js';

/**
 * Reference quantize/dequantize for every type tandem supports, byte-for-byte in ggml's
 * layouts (little-endian). These are the truth the fast kernels are tested against.
 * A row of a ggml tensor is a whole number of blocks, so any run of whole blocks can be
 * converted on its own: a tensor, a row, or a slice of rows.
 */

function checkLength(what: string, got: number, want: number): void {
  if (got < want) {
    throw new TandemError('INVALID_ARGUMENT', `${what} holds ${got} bytes/elements, needs ${want}`, {
      hint: 'size the buffer with byteSize(type, n)',
      details: { got, want },
    });
  }
}

/** Quantizes `src` (a multiple of the block size) into ggml's bytes for `type`. */
export function quantize(type: number, src: Float32Array, dst?: Uint8Array): Uint8Array {
  const info = supportedType(type);
  const n = src.length;
  const bytes = byteSize(info, n);
  const out = dst ?? new Uint8Array(bytes);
  checkLength('quantize destination', out.length, bytes);
  switch (info.id) {
    case GgmlType.F32:
      out.set(new Uint8Array(src.buffer, src.byteOffset, bytes));
      break;
    case GgmlType.F16:
      for (let i = 0; i < n; i++) {
        const h = f32ToF16(src[i] as number);
        out[2 * i] = h & 0xff;
        out[2 * i + 1] = h >>> 8;
      }
      break;
    case GgmlType.BF16:
      for (let i = 0; i < n; i++) {
        const h = f32ToBf16(src[i] as number);
        out[2 * i] = h & 0xff;
        out[2 * i + 1] = h >>> 8;
      }
      break;
    case GgmlType.Q8_0:
      quantizeQ8_0(src, out);
      break;
    case GgmlType.Q4_0:
      quantizeQ4_0(src, out);
      break;
    case GgmlType.Q4_K:
      quantizeQ4_K(src, out);
      break;
    case GgmlType.Q5_K:
      quantizeQ5_K(src, out);
      break;
    case GgmlType.Q6_K:
      quantizeQ6_K(src, out);
      break;
    default:
      supportedType(-1);
  }
  return out;
}

/** Dequantizes `n` values of `type` from ggml's bytes in `src`. */
export function dequantize(type: number, src: Uint8Array, n: number, dst?: Float32Array): Float32Array {
  const info = supportedType(type);
  const bytes = byteSize(info, n);
  checkLength('dequantize source', src.length, bytes);
  const out = dst ?? new Float32Array(n);
  checkLength('dequantize destination', out.length, n);
  const view = out.length === n ? out : out.subarray(0, n);
  switch (info.id) {
    case GgmlType.F32:
      new Uint8Array(view.buffer, view.byteOffset, bytes).set(src.subarray(0, bytes));
      break;
    case GgmlType.F16:
      for (let i = 0; i < n; i++)
        view[i] = f16Table[(src[2 * i] as number) | ((src[2 * i + 1] as number) << 8)] as number;
      break;
    case GgmlType.BF16:
      for (let i = 0; i < n; i++)
        view[i] = bf16ToF32((src[2 * i] as number) | ((src[2 * i + 1] as number) << 8));
      break;
    case GgmlType.Q8_0:
      dequantizeQ8_0(src, view);
      break;
    case GgmlType.Q4_0:
      dequantizeQ4_0(src, view);
      break;
    case GgmlType.Q4_K:
      dequantizeQ4_K(src, view);
      break;
    case GgmlType.Q5_K:
      dequantizeQ5_K(src, view);
      break;
    case GgmlType.Q6_K:
      dequantizeQ6_K(src, view);
      break;
    default:
      supportedType(-1);
  }
  return out;
}
