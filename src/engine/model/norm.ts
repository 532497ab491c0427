/**
 * RMSNorm with llama.cpp's exact float chain: squares rounded to f32 and summed in f64,
 * mean, mean + eps, sqrt and 1 / sqrt each rounded to f32, then (x * scale) rounded before
 * the weight multiplies it. Being one ulp off in `scale` is harmless by itself, but it moves
 * activations across q8_0 rounding ties in the next matmul, which then differs from
 * llama.cpp by one quantisation step (measured: a flipped greedy token on a Q8_0 model).
 * It costs O(width) per token, nothing beside the matmuls, so it runs here rather than in
 * the kernels. x, out: [n, width]; weight: [width]; out may be x.
 */
export function rmsNorm(x: Float32Array, weight: Float32Array, eps: number, out: Float32Array, n: number): void {
  const fr = Math.fround;
  const dim = weight.length;
  const eps32 = fr(eps);
  for (let t = 0; t < n; t++) {
    const o = t * dim;
    let sum = 0;
    for (let i = 0; i < dim; i++) {
      const v = x[o + i] as number;
      sum += fr(v * v);
    }
    const scale = fr(1 / fr(Math.sqrt(fr(fr(sum / dim) + eps32))));
    for (let i = 0; i < dim; i++) out[o + i] = fr((x[o + i] as number) * scale) * (weight[i] as number);
  }
}
