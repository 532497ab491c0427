// Shared helpers for the AssemblyScript kernels. All pointers are byte offsets into the one
// imported (shared) memory; the host owns every allocation.

/** First index of thread `tid`'s share of `total` items split over `nt` threads. */
// @ts-ignore: decorator
@inline export function part(total: i32, tid: i32, nt: i32): i32 {
  return <i32>((<i64>total * <i64>tid) / <i64>nt);
}

/** f16 bit pattern -> f32 (exact, subnormals included; inf/NaN not expected in weights). */
// @ts-ignore: decorator
@inline export function f16(h: u32): f32 {
  const bits = (h & 0x7fff) << 13;
  const v = reinterpret<f32>(bits) * reinterpret<f32>(0x77800000); // * 2^112
  return (h & 0x8000) != 0 ? -v : v;
}

/** Lanes [sum(a), sum(b), sum(c), sum(d)] of four i32x4 vectors. */
// @ts-ignore: decorator
@inline export function hsum4i(a: v128, b: v128, c: v128, d: v128): v128 {
  const ab = i32x4.add(v128.shuffle<i32>(a, b, 0, 1, 4, 5), v128.shuffle<i32>(a, b, 2, 3, 6, 7));
  const cd = i32x4.add(v128.shuffle<i32>(c, d, 0, 1, 4, 5), v128.shuffle<i32>(c, d, 2, 3, 6, 7));
  return i32x4.add(v128.shuffle<i32>(ab, cd, 0, 2, 4, 6), v128.shuffle<i32>(ab, cd, 1, 3, 5, 7));
}

/** Lanes [sum(a), sum(b), sum(c), sum(d)] of four f32x4 vectors. */
// @ts-ignore: decorator
@inline export function hsum4f(a: v128, b: v128, c: v128, d: v128): v128 {
  const ab = f32x4.add(v128.shuffle<f32>(a, b, 0, 1, 4, 5), v128.shuffle<f32>(a, b, 2, 3, 6, 7));
  const cd = f32x4.add(v128.shuffle<f32>(c, d, 0, 1, 4, 5), v128.shuffle<f32>(c, d, 2, 3, 6, 7));
  return f32x4.add(v128.shuffle<f32>(ab, cd, 0, 2, 4, 6), v128.shuffle<f32>(ab, cd, 1, 3, 5, 7));
}

// @ts-ignore: decorator
@inline export function hsumi(a: v128): i32 {
  const b = i32x4.add(a, v128.shuffle<i32>(a, a, 2, 3, 0, 1));
  return i32x4.extract_lane(b, 0) + i32x4.extract_lane(b, 1);
}

// @ts-ignore: decorator
@inline export function hsumf(a: v128): f32 {
  const b = f32x4.add(a, v128.shuffle<f32>(a, a, 2, 3, 0, 1));
  return f32x4.extract_lane(b, 0) + f32x4.extract_lane(b, 1);
}
