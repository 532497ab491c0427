/** Rounding as ggml does it: `nearest_int` (halves to even) and C's `roundf` (halves away from zero). */

/** Adding 1.5 * 2^52 leaves no fraction bits, so the FPU rounds half to even (|x| < 2^51). */
const MAGIC = 6755399441055744;

export function nearestInt(x: number): number {
  return x + MAGIC - MAGIC;
}

export function roundAway(x: number): number {
  return x < 0 ? -Math.round(-x) : Math.round(x);
}

/** C's `(int8_t)x` for values in range: truncation toward zero. */
export function truncInt(x: number): number {
  return Math.trunc(x);
}

export const fround = Math.fround;
