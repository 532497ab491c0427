/**
 * Finite-difference gradient checks for the backward kernels' tests: central differences
 * of a scalar loss against an analytic gradient, on f32 inputs.
 */

/** Deterministic uniform values in [-scale, scale) (xorshift32). */
export function seeded(n: number, seed: number, scale = 1): Float32Array {
  let s = seed >>> 0 || 1;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    out[i] = (((s >>> 0) / 2 ** 32) * 2 - 1) * scale;
  }
  return out;
}

/** sum(out * w) in f64: a scalar loss whose gradient with respect to out is w. */
export function dotLoss(out: Float32Array, w: Float32Array): number {
  let s = 0;
  for (let i = 0; i < out.length; i++) s += (out[i] as number) * (w[i] as number);
  return s;
}

/**
 * The largest |numeric - analytic| over max |analytic| for `probes` entries of x spread
 * over it: numeric = (loss(x + h) - loss(x - h)) / 2h. f32 inputs limit h from below
 * (rounding of x +- h), the loss's curvature from above; h = 1e-2 suits values of order 1.
 */
export function gradError(
  x: Float32Array,
  analytic: Float32Array,
  loss: () => number,
  probes = 24,
  h = 1e-2,
): number {
  let maxA = 0;
  for (const a of analytic) maxA = Math.max(maxA, Math.abs(a));
  let worst = 0;
  const stride = Math.max(1, Math.floor(x.length / probes));
  for (let i = 0; i < x.length; i += stride) {
    const keep = x[i] as number;
    x[i] = keep + h;
    const up = loss();
    x[i] = keep - h;
    const down = loss();
    x[i] = keep;
    const numeric = (up - down) / (Math.fround(keep + h) - Math.fround(keep - h));
    worst = Math.max(worst, Math.abs(numeric - (analytic[i] as number)));
  }
  return worst / Math.max(maxA, 1e-12);
}
