import type { TrainOps } from './train-ops.js';

/**
 * The three f32 matrix products a training step needs, row-major, behind one interface so
 * that the layer code is written once and runs on the TypeScript twin (the truth for tests)
 * or the WebAssembly SIMD kernels (gemm-wasm.ts). `acc` adds the product to c instead of
 * overwriting it (gradients of a weight used by several micro-batches accumulate).
 *
 *   nt: c[m, n] = a[m, k] . b[n, k]^T   forward y = x W^T, W a ggml/PyTorch [out, in] matrix
 *   nn: c[m, n] = a[m, k] . b[k, n]     input gradient dX = dY W
 *   tn: c[m, n] = a[k, m]^T . b[k, n]   weight gradient dW = dY^T X
 */
export interface Gemm {
  readonly name: 'reference' | 'wasm' | 'native';
  /** The step's other ops where this backend has its own (native); else train-ops.ts's referenceOps. */
  readonly ops?: TrainOps;
  nt(a: Float32Array, b: Float32Array, c: Float32Array, m: number, n: number, k: number, acc?: boolean): void;
  nn(a: Float32Array, b: Float32Array, c: Float32Array, m: number, n: number, k: number, acc?: boolean): void;
  tn(a: Float32Array, b: Float32Array, c: Float32Array, m: number, n: number, k: number, acc?: boolean): void;
}

/** The plain TypeScript twin: sums in f64 per output, rounded once to f32. */
export const referenceGemm: Gemm = {
  name: 'reference',
  nt(a, b, c, m, n, k, acc = false) {
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let s = 0;
        for (let p = 0; p < k; p++) s += (a[i * k + p] as number) * (b[j * k + p] as number);
        c[i * n + j] = acc ? (c[i * n + j] as number) + s : s;
      }
    }
  },
  nn(a, b, c, m, n, k, acc = false) {
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let s = 0;
        for (let p = 0; p < k; p++) s += (a[i * k + p] as number) * (b[p * n + j] as number);
        c[i * n + j] = acc ? (c[i * n + j] as number) + s : s;
      }
    }
  },
  tn(a, b, c, m, n, k, acc = false) {
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let s = 0;
        for (let p = 0; p < k; p++) s += (a[p * m + i] as number) * (b[p * n + j] as number);
        c[i * n + j] = acc ? (c[i * n + j] as number) + s : s;
      }
    }
  },
};
