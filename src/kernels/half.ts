/**
 * IEEE half (f16) and bfloat16 conversions as ggml does them on x86: f32 -> f16 and
 * f32 -> bf16 round to nearest, ties to even. Kept here (not dtype.ts) so the matmul
 * numerics do not depend on the collectives' element helpers.
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** f16 bit pattern -> value, for all 65536 patterns. */
export const f16ToF32Table: Float32Array = (() => {
  const table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exp = (h >> 10) & 0x1f;
    const mant = h & 0x3ff;
    if (exp === 0) table[h] = sign * mant * 2 ** -24;
    else if (exp === 31) table[h] = mant ? NaN : sign * Infinity;
    else table[h] = sign * (1 + mant / 1024) * 2 ** (exp - 15);
  }
  return table;
})();

export function f16ToF32(h: number): number {
  return f16ToF32Table[h & 0xffff] as number;
}

/** f32 value -> f16 bit pattern, round to nearest even (like F16C's _cvtss_sh). */
export function f32ToF16(x: number): number {
  f32[0] = x;
  const bits = u32[0] as number;
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  let mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rest = mant & ((1 << shift) - 1);
    let m = mant >>> shift;
    if (rest > half || (rest === half && m & 1)) m++;
    return sign | m;
  }
  let m = mant >>> 13;
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && m & 1)) {
    m++;
    if (m === 0x400) {
      m = 0;
      e++;
      if (e >= 31) return sign | 0x7c00;
    }
  }
  return sign | (e << 10) | m;
}

/** x rounded to the nearest f16 value. */
export function roundF16(x: number): number {
  return f16ToF32(f32ToF16(x));
}

export function bf16ToF32(h: number): number {
  u32[0] = (h & 0xffff) << 16;
  return f32[0] as number;
}

/** f32 value -> bf16 bit pattern, round to nearest even; NaN stays NaN (ggml's rule). */
export function f32ToBf16(x: number): number {
  f32[0] = x;
  const bits = u32[0] as number;
  if ((bits & 0x7fffffff) > 0x7f800000) return ((bits >>> 16) | 64) & 0xffff;
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

export function roundBf16(x: number): number {
  return bf16ToF32(f32ToBf16(x));
}

/** Round half to even, like nearbyint in the default rounding mode. */
export function roundEven(x: number): number {
  const r = Math.round(x);
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r;
}
