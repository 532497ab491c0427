/**
 * RMSNorm forward and backward for training: y = x * r * w with r = 1 / sqrt(mean(x^2) + eps)
 * per row. x, y, dy, dx: [n, dim]; w, dw: [dim]; r: [n] (saved by the forward for the backward).
 */
export function rmsNormForward(
  x: Float32Array,
  w: Float32Array,
  eps: number,
  y: Float32Array,
  r: Float32Array,
  n: number,
): void {
  const dim = w.length;
  for (let t = 0; t < n; t++) {
    const o = t * dim;
    let ss = 0;
    for (let i = 0; i < dim; i++) ss += (x[o + i] as number) ** 2;
    const rt = 1 / Math.sqrt(ss / dim + eps);
    r[t] = rt;
    for (let i = 0; i < dim; i++) y[o + i] = (x[o + i] as number) * rt * (w[i] as number);
  }
}

/**
 * dx = r * (dy * w) - x * r^3 / dim * sum(dy * w * x); dw += sum over rows of dy * x * r.
 * dx is overwritten (it may not alias dy).
 */
export function rmsNormBackward(
  x: Float32Array,
  w: Float32Array,
  r: Float32Array,
  dy: Float32Array,
  dx: Float32Array,
  dw: Float32Array,
  n: number,
): void {
  const dim = w.length;
  for (let t = 0; t < n; t++) {
    const o = t * dim;
    const rt = r[t] as number;
    let dot = 0;
    for (let i = 0; i < dim; i++) {
      const g = (dy[o + i] as number) * (w[i] as number);
      dot += g * (x[o + i] as number);
      dw[i] = (dw[i] as number) + (dy[o + i] as number) * (x[o + i] as number) * rt;
    }
    const k = (rt * rt * rt * dot) / dim;
    for (let i = 0; i < dim; i++)
      dx[o + i] = rt * (dy[o + i] as number) * (w[i] as number) - (x[o + i] as number) * k;
  }
}
