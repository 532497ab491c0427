/**
 * IEEE half (f16) and bfloat16 conversions, bit-exact with ggml's scalar conversions:
 * f32 -> f16 rounds to nearest even (overflow to infinity, NaN stays NaN);
 * f32 -> bf16 rounds to nearest even and forces NaNs quiet.
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** Every f16 bit pattern decoded once: dequantization is a table lookup. */
export const f16Table: Float32Array = buildF16Table();

function decodeF16(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

function buildF16Table(): Float32Array {
  const table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) table[h] = decodeF16(h);
  return table;
}

export function f16ToF32(h: number): number {
  return f16Table[h & 0xffff] as number;
}

/** f32 -> f16 bits, round to nearest even. */
export function f32ToF16(value: number): number {
  f32[0] = value;
  const x = u32[0] as number;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 | (mant >>> 13) : 0);
  const e = exp - 112; // rebias 127 -> 15
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rem > halfway || (rem === halfway && half & 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && half & 1)) half++; // a carry into the exponent gives infinity, as it should
  return sign | half;
}

/** f32 -> bf16 bits (upper half of the f32, rounded to nearest even). */
export function f32ToBf16(value: number): number {
  f32[0] = value;
  const x = u32[0] as number;
  if ((x & 0x7fffffff) > 0x7f800000) return ((x >>> 16) | 64) & 0xffff;
  return ((x + (0x7fff + ((x >>> 16) & 1))) >>> 16) & 0xffff;
}

export function bf16ToF32(h: number): number {
  u32[0] = (h & 0xffff) << 16;
  return f32[0] as number;
}
