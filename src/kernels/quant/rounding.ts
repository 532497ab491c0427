/** Rounding as ggml does it: `nearest_int` (halves to even) and C's `roundf` (halves away from zero). */

export function nearestInt(x: number): number {
  const r = Math.round(x);
  return r - x === 0.5 && r & 1 ? r - 1 : r;
}

export function roundAway(x: number): number {
  return x < 0 ? -Math.round(-x) : Math.round(x);
}

/** C's `(int8_t)x` for values in range: truncation toward zero. */
export function truncInt(x: number): number {
  return Math.trunc(x);
}

export const fround = Math.fround;
