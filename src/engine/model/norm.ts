import { rmsNormRef } from '../../kernels/index.js';

/**
 * RMSNorm with llama.cpp's exact float chain (see rmsNormRef). The forward pass calls the
 * kernels' rmsNorm, which every backend implements bit-identically to this function (the
 * native one in C, threaded over tokens); this stays for callers without a Kernels object.
 * x, out: [n, width]; weight: [width]; out may be x.
 */
export function rmsNorm(
  x: Float32Array,
  weight: Float32Array,
  eps: number,
  out: Float32Array,
  n: number,
): void {
  rmsNormRef(x, weight, eps, out, n);
}
