import assert from 'node:assert/strict';
import { f16ToF32Table } from './half.js';

/**
 * Element types the collectives move and reduce. f16 and bf16 travel as raw 16-bit patterns
 * in a Uint16Array; arithmetic on them is done exactly in float64 and rounded once
 * (round to nearest, ties to even), which equals IEEE arithmetic in the narrow type.
 */
export type DType = 'f32' | 'f16' | 'bf16' | 'i32';

export const dtypes: readonly DType[] = ['f32', 'f16', 'bf16', 'i32'];

/** Stable small integers for wire headers; never renumber. */
export const dtypeCodes: Readonly<Record<DType, number>> = { f32: 1, f16: 2, bf16: 3, i32: 4 };

export type DTypeArray = Float32Array | Uint16Array | Int32Array;

export function bytesPerElement(dtype: DType): number {
  return dtype === 'f16' || dtype === 'bf16' ? 2 : 4;
}

export function dtypeFromCode(code: number): DType | undefined {
  return dtypes.find((d) => dtypeCodes[d] === code);
}

/** The dtype a typed array implies; a Uint16Array is ambiguous (f16 or bf16) and needs `hint`. */
export function dtypeOf(data: DTypeArray, hint?: DType): DType {
  if (data instanceof Float32Array) return 'f32';
  if (data instanceof Int32Array) return 'i32';
  assert.ok(hint === 'f16' || hint === 'bf16', 'a Uint16Array needs dtype f16 or bf16');
  return hint;
}

/** A new array of `count` elements of `dtype`. */
export function allocate(dtype: DType, count: number): DTypeArray {
  switch (dtype) {
    case 'f32':
      return new Float32Array(count);
    case 'i32':
      return new Int32Array(count);
    case 'f16':
    case 'bf16':
      return new Uint16Array(count);
  }
}

/** A view of `bytes` (aligned to the element size) as an array of `dtype`. */
export function viewAs(dtype: DType, bytes: Uint8Array): DTypeArray {
  const n = bytes.byteLength / bytesPerElement(dtype);
  switch (dtype) {
    case 'f32':
      return new Float32Array(bytes.buffer, bytes.byteOffset, n);
    case 'i32':
      return new Int32Array(bytes.buffer, bytes.byteOffset, n);
    case 'f16':
    case 'bf16':
      return new Uint16Array(bytes.buffer, bytes.byteOffset, n);
  }
}

export function bytesOf(data: DTypeArray): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

const f64 = new Float64Array(1);
const f64hi = new Uint32Array(f64.buffer, 4, 1);

/** Round a non-negative float64 to an integer, ties to even (exact: the input is already scaled by a power of two). */
function roundEven(v: number): number {
  const f = Math.floor(v);
  const d = v - f;
  return d > 0.5 || (d === 0.5 && f % 2 === 1) ? f + 1 : f;
}

/** Unbiased binary exponent of a finite non-zero float64 (floor(log2|x|)), exact. */
function exponentOf(a: number): number {
  f64[0] = a;
  const e = ((f64hi[0] as number) >>> 20) & 0x7ff;
  if (e !== 0) return e - 1023;
  return Math.floor(Math.log2(a)); // float64 subnormal: far below any f16/bf16 value
}

/**
 * Float64 -> narrow float bits, round to nearest even. `mant` stored mantissa bits, `bias`
 * exponent bias, `expBits` exponent width. Handles subnormals, overflow to infinity and NaN.
 */
function toNarrow(x: number, mant: number, bias: number, expBits: number): number {
  const maxExp = (1 << expBits) - 1;
  const sign = x < 0 || Object.is(x, -0) ? 1 << (mant + expBits) : 0;
  if (Number.isNaN(x)) return (maxExp << mant) | (1 << (mant - 1));
  const a = Math.abs(x);
  if (a === Infinity) return sign | (maxExp << mant);
  if (a === 0) return sign;
  let e = exponentOf(a);
  const minExp = 1 - bias;
  if (e < minExp) {
    // subnormal: value = m * 2^(minExp - mant); m == 2^mant lands on the smallest normal, encoded right.
    return sign | roundEven(a * 2 ** (mant - minExp));
  }
  let m = roundEven(a * 2 ** (mant - e));
  if (m === 2 ** (mant + 1)) {
    m /= 2;
    e += 1;
  }
  if (e + bias >= maxExp) return sign | (maxExp << mant);
  return sign | ((e + bias) << mant) | (m - 2 ** mant);
}

function fromNarrow(bits: number, mant: number, bias: number, expBits: number): number {
  const maxExp = (1 << expBits) - 1;
  const sign = bits >>> (mant + expBits) ? -1 : 1;
  const e = (bits >>> mant) & maxExp;
  const m = bits & ((1 << mant) - 1);
  if (e === maxExp) return m ? NaN : sign * Infinity;
  if (e === 0) return sign * m * 2 ** (1 - bias - mant);
  return sign * (m + 2 ** mant) * 2 ** (e - bias - mant);
}

/** float64 -> IEEE binary16 bits, round to nearest even. */
export function toF16(x: number): number {
  return toNarrow(x, 10, 15, 5);
}

/** float64 -> bfloat16 bits, round to nearest even (NaN -> a quiet NaN). */
export function toBf16(x: number): number {
  return toNarrow(x, 7, 127, 8);
}

/** Decoded value of every 16-bit pattern: decoding is a table lookup on the hot path (the kernels' f16 table). */
export const f16Table: Float32Array = f16ToF32Table;

export const bf16Table: Float32Array = (() => {
  const t = new Float32Array(65536);
  for (let i = 0; i < 65536; i++) t[i] = fromNarrow(i, 7, 127, 8);
  return t;
})();

export function fromF16(bits: number): number {
  return f16Table[bits & 0xffff] as number;
}

export function fromBf16(bits: number): number {
  return bf16Table[bits & 0xffff] as number;
}

/** Element `i` of `data` as a float64 number. */
export function readElement(dtype: DType, data: DTypeArray, i: number): number {
  const v = data[i] as number;
  if (dtype === 'f16') return fromF16(v);
  if (dtype === 'bf16') return fromBf16(v);
  return v;
}

/** Store float64 `x` into element `i`, rounded to the dtype (i32: truncated toward zero, wrapped). */
export function writeElement(dtype: DType, data: DTypeArray, i: number, x: number): void {
  if (dtype === 'f16') data[i] = toF16(x);
  else if (dtype === 'bf16') data[i] = toBf16(x);
  else if (dtype === 'i32') data[i] = Math.trunc(x) | 0;
  else data[i] = x;
}

/** Encode float64 values into a new array of `dtype`. */
export function fromNumbers(dtype: DType, values: ArrayLike<number>): DTypeArray {
  const out = allocate(dtype, values.length);
  for (let i = 0; i < values.length; i++) writeElement(dtype, out, i, values[i] as number);
  return out;
}

/** Decode an array of `dtype` into float64 numbers. */
export function toNumbers(dtype: DType, data: DTypeArray): Float64Array {
  const out = new Float64Array(data.length);
  for (let i = 0; i < data.length; i++) out[i] = readElement(dtype, data, i);
  return out;
}
