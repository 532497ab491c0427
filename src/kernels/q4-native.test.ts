import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createKernels } from './index.js';
import { GEMM_TOKENS, GgmlType } from './types.js';
import { randomFloats, randomWeightBytes } from './testing/random-weights.js';

/*
 * Q4_0 on the native kernels with the activations quantised once per matmul (AVX-512 VNNI:
 * mm_q4l below GEMM_TOKENS, mm_q4lt from there on; NEON: mm_q4v, mm_q4t; the wasm ones where
 * the build has no such kernels) against the TypeScript reference twin: token counts on both
 * sides of GEMM_TOKENS and past one group of 16 tokens, row counts that leave an odd 4-row tile, an odd block count (a tail block
 * without its pair) and a real width; one and two threads. Tolerance: 2e-5 of the output's
 * magnitude (the block dots are exact integers on both sides; only the float accumulation of
 * the blocks differs).
 */
for (const threads of [1, 2]) {
  test(`native Q4_0 matvec and matmul equal the reference (${threads} threads)`, async (t) => {
    const k = await createKernels({ backend: 'native', threads, smallJob: 0 }).catch(() => undefined);
    if (!k) return t.skip('no native kernels here');
    const ref = await createKernels({ backend: 'reference' });
    try {
      for (const [rows, cols] of [
        [37, 96],
        [20, 2144],
        [64, 2048],
      ] as const) {
        const data = randomWeightBytes(GgmlType.Q4_0, rows, cols, rows * 7 + cols);
        const w = k.uploadWeight({ type: GgmlType.Q4_0, rows, cols, data });
        const wr = ref.uploadWeight({ type: GgmlType.Q4_0, rows, cols, data });
        for (const n of [1, 2, 5, GEMM_TOKENS - 1, GEMM_TOKENS, 16, 31]) {
          const x = randomFloats(n * cols, 3 + n);
          const y = new Float32Array(n * rows);
          const want = new Float32Array(n * rows);
          if (n === 1) k.matvec(w, x, y);
          else k.matmul(w, x, y, n);
          ref.matmul(wr, x, want, n);
          const scale = want.reduce((m, v) => Math.max(m, Math.abs(v)), 0) || 1;
          for (let i = 0; i < y.length; i++)
            assert.ok(
              Math.abs((y[i] as number) - (want[i] as number)) <= 2e-5 * scale,
              `Q4_0 [${rows}, ${cols}] n=${n}, out ${i}: ${y[i]} vs ${want[i]}`,
            );
        }
      }
    } finally {
      await k.close();
      await ref.close();
    }
  });
}
