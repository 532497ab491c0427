import assert from 'node:assert/strict';
import { bf16Table, f16Table, toBf16, toF16, type DType, type DTypeArray } from './dtype.js';

/**
 * Element-wise reductions for the collectives: the TypeScript reference kernels. Every
 * function is deterministic and, for a given pair of operands, commutative, so a fixed
 * reduction order gives bit-identical results on every rank.
 *
 * Semantics per dtype: f32 IEEE single arithmetic; f16/bf16 exact in float64 then one
 * rounding to the narrow type (== IEEE arithmetic in that type); i32 wraps modulo 2^32.
 * max/min propagate NaN (Math.max/Math.min) and treat +0 as larger than -0.
 */
export type ReduceOp = 'sum' | 'max' | 'min';

export const reduceOps: readonly ReduceOp[] = ['sum', 'max', 'min'];

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** f32 bit pattern -> f16 bits for the normal f16 range; anything else takes the exact path. */
function f16FromExact(s: number): number {
  f32[0] = s;
  if (f32[0] !== s) return toF16(s); // not representable in f32: avoid double rounding
  const b = u32[0] as number;
  const e = ((b >>> 23) & 0xff) - 112;
  if (e < 1 || e > 30) return toF16(s);
  let h = ((b >>> 16) & 0x8000) | (e << 10) | ((b & 0x7fffff) >>> 13);
  const rest = b & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (h & 1) === 1)) h++;
  return h;
}

function bf16FromExact(s: number): number {
  f32[0] = s;
  if (f32[0] !== s || s !== s) return toBf16(s);
  const b = u32[0] as number;
  return (b + 0x7fff + ((b >>> 16) & 1)) >>> 16;
}

function reduceF32(op: ReduceOp, acc: Float32Array, other: Float32Array, n: number): void {
  if (op === 'sum') for (let i = 0; i < n; i++) acc[i] = (acc[i] as number) + (other[i] as number);
  else if (op === 'max') for (let i = 0; i < n; i++) acc[i] = Math.max(acc[i] as number, other[i] as number);
  else for (let i = 0; i < n; i++) acc[i] = Math.min(acc[i] as number, other[i] as number);
}

function reduceI32(op: ReduceOp, acc: Int32Array, other: Int32Array, n: number): void {
  if (op === 'sum') for (let i = 0; i < n; i++) acc[i] = ((acc[i] as number) + (other[i] as number)) | 0;
  else if (op === 'max') for (let i = 0; i < n; i++) acc[i] = Math.max(acc[i] as number, other[i] as number);
  else for (let i = 0; i < n; i++) acc[i] = Math.min(acc[i] as number, other[i] as number);
}

function reduceHalf(op: ReduceOp, bf: boolean, acc: Uint16Array, other: Uint16Array, n: number): void {
  const table = bf ? bf16Table : f16Table;
  const encode = bf ? bf16FromExact : f16FromExact;
  for (let i = 0; i < n; i++) {
    const a = table[acc[i] as number] as number;
    const b = table[other[i] as number] as number;
    // max/min of two decoded values is one of them exactly; re-encode only to canonicalise NaN.
    const r = op === 'sum' ? a + b : op === 'max' ? Math.max(a, b) : Math.min(a, b);
    acc[i] = encode(r);
  }
}

/** acc[i] = acc[i] (op) other[i] for every i < acc.length; `other` must be at least as long. */
export function reduceInto(op: ReduceOp, dtype: DType, acc: DTypeArray, other: DTypeArray): void {
  const n = acc.length;
  // the message is built only when the check fails: a template string built on every call is a
  // measurable share of a small all-reduce (docs/collectives.md, "Measured facts behind the constants")
  if (other.length < n) assert.fail(`reduceInto: other has ${other.length} elements, need ${n}`);
  switch (dtype) {
    case 'f32':
      return reduceF32(op, acc as Float32Array, other as Float32Array, n);
    case 'i32':
      return reduceI32(op, acc as Int32Array, other as Int32Array, n);
    case 'f16':
      return reduceHalf(op, false, acc as Uint16Array, other as Uint16Array, n);
    case 'bf16':
      return reduceHalf(op, true, acc as Uint16Array, other as Uint16Array, n);
  }
}

/** data[i] = data[i] / divisor (the `mean` of an all-reduce); i32 truncates toward zero. */
export function divideInPlace(dtype: DType, data: DTypeArray, divisor: number): void {
  const n = data.length;
  if (dtype === 'f32') {
    for (let i = 0; i < n; i++) data[i] = (data[i] as number) / divisor;
  } else if (dtype === 'i32') {
    for (let i = 0; i < n; i++) data[i] = Math.trunc((data[i] as number) / divisor);
  } else {
    const bf = dtype === 'bf16';
    const table = bf ? bf16Table : f16Table;
    for (let i = 0; i < n; i++) {
      const v = (table[data[i] as number] as number) / divisor;
      data[i] = bf ? toBf16(v) : toF16(v);
    }
  }
}
