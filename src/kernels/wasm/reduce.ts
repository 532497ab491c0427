// Element-wise reductions for the collectives, the portable fast path when the native C twins
// (reduce-native.c) cannot be built: acc[i] = acc[i] (op) other[i], equal to reduce.ts bit for
// bit (the numerics, and why float arithmetic is exact enough for f16/bf16, are explained in
// reduce-native.c). A module of its own (build-kernels.js) on a private, unshared memory: the
// host copies a chunk of each operand into ACC and OTHER, calls reduce and copies ACC back
// (reduce-wasm.ts). Copies into a SharedArrayBuffer run several times slower, hence not the
// engine's kernels module, which imports a shared memory.
//
// Every loop runs whole vectors up to n rounded up: lanes past n hold stale data, are reduced
// harmlessly (no SIMD operation traps) and never copied back.

/** Bytes of each operand buffer; both chunks stay in L2 between the copies and the loop. */
export const CHUNK_BYTES: i32 = 32768;
export const ACC: usize = memory.data(CHUNK_BYTES, 16);
export const OTHER: usize = memory.data(CHUNK_BYTES, 16);

const F32 = 0;
const I32 = 1;
const F16 = 2;
const SUM = 0;
const MAX = 1;
const MIN = 2;
/** Canonical NaNs of the result: V8's Math.max/min NaN for f32; toF16/toBf16 of NaN (positive quiet). */
const F32_NAN = 0xffc00000;
const F16_NAN = 0x7e00;
const BF16_NAN = 0x7fc0;

/** dtype: 0 f32, 1 i32, 2 f16, 3 bf16; op: 0 sum, 1 max, 2 min; n elements (CHUNK_BYTES of them at most) at ACC and OTHER. */
export function reduce(dtype: i32, op: i32, n: i32): void {
  // each loop is inlined with constant dtype and op, so that binaryen can specialise it (it still
  // merges some max and min loops, leaving one predictable branch per vector)
  if (dtype == F32) {
    if (op == SUM) loopF32(SUM, n);
    else if (op == MAX) loopF32(MAX, n);
    else loopF32(MIN, n);
  } else if (dtype == I32) {
    if (op == SUM) loopI32(SUM, n);
    else if (op == MAX) loopI32(MAX, n);
    else loopI32(MIN, n);
  } else if (dtype == F16) {
    if (op == SUM) loopHalf(false, SUM, n);
    else if (op == MAX) loopHalf(false, MAX, n);
    else loopHalf(false, MIN, n);
  } else {
    if (op == SUM) loopHalf(true, SUM, n);
    else if (op == MAX) loopHalf(true, MAX, n);
    else loopHalf(true, MIN, n);
  }
}

/** End of the whole 16-byte vectors that cover `bytes` from ACC. */
// @ts-ignore: decorator
@inline function endOf(bytes: usize): usize {
  return ACC + ((bytes + 15) & ~15);
}

// @ts-ignore: decorator
@inline function loopF32(op: i32, n: i32): void {
  const end = endOf(<usize>n << 2);
  for (let p = ACC, q = OTHER; p < end; p += 16, q += 16) {
    const x = v128.load(p);
    const y = v128.load(q);
    v128.store(p, op == SUM ? f32x4.add(x, y) : pick(op == MAX, x, y, x, y, F32_NAN));
  }
}

// @ts-ignore: decorator
@inline function loopI32(op: i32, n: i32): void {
  const end = endOf(<usize>n << 2);
  for (let p = ACC, q = OTHER; p < end; p += 16, q += 16) {
    const x = v128.load(p);
    const y = v128.load(q);
    v128.store(p, op == SUM ? i32x4.add(x, y) : op == MAX ? i32x4.max_s(x, y) : i32x4.min_s(x, y));
  }
}

// @ts-ignore: decorator
@inline function loopHalf(bf: bool, op: i32, n: i32): void {
  const end = endOf(<usize>n << 1);
  for (let p = ACC, q = OTHER; p < end; p += 16, q += 16) {
    const a = v128.load(p);
    const b = v128.load(q);
    const lo = half4(bf, op, i32x4.extend_low_i16x8_u(a), i32x4.extend_low_i16x8_u(b));
    const hi = half4(bf, op, i32x4.extend_high_i16x8_u(a), i32x4.extend_high_i16x8_u(b));
    v128.store(p, i16x8.narrow_i32x4_u(lo, hi)); // lanes hold 0..0xffff: the saturating narrow is exact
  }
}

/**
 * Bits of max (isMax) or min of floats x and y whose bits are bx and by (f32, or a half type's
 * bits in 32-bit lanes): the larger (smaller) one's bits; on a tie (only +0 and -0 compare
 * equal with different bits) bx & by (bx | by); `nan` when either is NaN: Math.max/min's rules.
 */
// @ts-ignore: decorator
@inline function pick(isMax: bool, x: v128, y: v128, bx: v128, by: v128, nan: u32): v128 {
  const first = isMax ? f32x4.gt(x, y) : f32x4.lt(x, y);
  const second = isMax ? f32x4.gt(y, x) : f32x4.lt(y, x);
  const tie = isMax ? v128.and(bx, by) : v128.or(bx, by);
  const r = v128.bitselect(bx, v128.bitselect(by, tie, second), first);
  return v128.bitselect(i32x4.splat(nan), r, v128.or(f32x4.ne(x, x), f32x4.ne(y, y)));
}

/** Four lanes of half bits (32-bit lanes) reduced: decoded to f32 exactly, then summed and rounded once, or picked. */
// @ts-ignore: decorator
@inline function half4(bf: bool, op: i32, ha: v128, hb: v128): v128 {
  const x = bf ? i32x4.shl(ha, 16) : f16Decode(ha);
  const y = bf ? i32x4.shl(hb, 16) : f16Decode(hb);
  if (op != SUM) return pick(op == MAX, x, y, ha, hb, bf ? BF16_NAN : F16_NAN);
  const s = f32x4.add(x, y);
  return bf ? bf16Encode(s) : f16Encode(s);
}

/** f16 bits (32-bit lanes) -> f32, exact: magnitude into place times 2^112 (subnormals included); exponent 31 -> inf/NaN. */
// @ts-ignore: decorator
@inline function f16Decode(h: v128): v128 {
  const m = i32x4.shl(v128.and(h, i32x4.splat(0x7fff)), 13);
  const finite = f32x4.mul(m, f32x4.splat(reinterpret<f32>(0x77800000)));
  const special = i32x4.eq(v128.and(h, i32x4.splat(0x7c00)), i32x4.splat(0x7c00));
  const mag = v128.bitselect(v128.or(m, i32x4.splat(0x7f800000)), finite, special);
  return v128.or(mag, i32x4.shl(v128.and(h, i32x4.splat(0x8000)), 16));
}

/** f32 -> f16 bits, round to nearest even, NaN -> 0x7e00: reduce-native.c's f16_enc lane by lane. */
// @ts-ignore: decorator
@inline function f16Encode(f: v128): v128 {
  const x = v128.and(f, i32x4.splat(0x7fffffff));
  const odd = v128.and(i32x4.shr_u(x, 13), i32x4.splat(1));
  const normal = i32x4.shr_u(i32x4.add(i32x4.add(x, i32x4.splat(0xc8000fff)), odd), 13);
  const sub = i32x4.sub(f32x4.add(x, f32x4.splat(0.5)), i32x4.splat(0x3f000000));
  const big = v128.bitselect(i32x4.splat(0x7c00), normal, i32x4.ge_u(x, i32x4.splat(0x47800000)));
  const sign = v128.and(i32x4.shr_u(f, 16), i32x4.splat(0x8000));
  const r = v128.or(v128.bitselect(sub, big, i32x4.lt_u(x, i32x4.splat(0x38800000))), sign);
  return v128.bitselect(i32x4.splat(F16_NAN), r, i32x4.gt_u(x, i32x4.splat(0x7f800000)));
}

/** f32 -> bf16 bits, round to nearest even by carry (into infinity past the largest bf16), NaN -> 0x7fc0. */
// @ts-ignore: decorator
@inline function bf16Encode(b: v128): v128 {
  const odd = v128.and(i32x4.shr_u(b, 16), i32x4.splat(1));
  const r = i32x4.shr_u(i32x4.add(i32x4.add(b, i32x4.splat(0x7fff)), odd), 16);
  return v128.bitselect(i32x4.splat(BF16_NAN), r, i32x4.gt_u(v128.and(b, i32x4.splat(0x7fffffff)), i32x4.splat(0x7f800000)));
}
