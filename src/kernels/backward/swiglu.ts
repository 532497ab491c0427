/** SwiGLU for training: h = silu(g) * u elementwise. All arrays the same length. */
export function swigluForward(g: Float32Array, u: Float32Array, h: Float32Array): void {
  for (let i = 0; i < h.length; i++) {
    const gi = g[i] as number;
    h[i] = (gi / (1 + Math.exp(-gi))) * (u[i] as number);
  }
}

/** dg = dh * u * silu'(g) with silu'(g) = s (1 + g (1 - s)), s = sigmoid(g); du = dh * silu(g). */
export function swigluBackward(
  g: Float32Array,
  u: Float32Array,
  dh: Float32Array,
  dg: Float32Array,
  du: Float32Array,
): void {
  for (let i = 0; i < dh.length; i++) {
    const gi = g[i] as number;
    const s = 1 / (1 + Math.exp(-gi));
    const d = dh[i] as number;
    du[i] = d * gi * s;
    dg[i] = d * (u[i] as number) * s * (1 + gi * (1 - s));
  }
}
