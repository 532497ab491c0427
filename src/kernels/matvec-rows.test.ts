import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createKernels } from './index.js';
import { GgmlType, type KernelsBackend } from './types.js';
import { randomFloats, randomWeightBytes } from './testing/random-weights.js';

/*
 * matvecRows: row t of n one-token products is bit for bit matvec on x[t] (the batched decode
 * round's output head relies on it), for every token count, odd block counts (a tail pair)
 * and rows that are not a multiple of the 4-row tile, on one and two threads.
 */
for (const backend of ['native', 'wasm'] as KernelsBackend[]) {
  for (const threads of [1, 2]) {
    test(`matvecRows equals matvec per token bit for bit (${backend}, ${threads} threads)`, async (t) => {
      const k = await createKernels({ backend, threads, smallJob: 0 }).catch(() => undefined);
      if (!k) return t.skip(`no ${backend} kernels here`);
      try {
        if (!k.matvecRows) return t.skip(`${backend} has no matvecRows`);
        for (const type of [GgmlType.Q8_0, GgmlType.Q4_0]) {
          for (const [rows, cols] of [
            [37, 96],
            [64, 2048],
          ] as const) {
            const w = k.uploadWeight({
              type,
              rows,
              cols,
              data: randomWeightBytes(type, rows, cols, rows + cols),
            });
            const x = randomFloats(11 * cols, 7);
            for (let n = 1; n <= 11; n++) {
              const y = new Float32Array(n * rows);
              k.matvecRows(w, x.subarray(0, n * cols), y, n);
              for (let r = 0; r < n; r++) {
                const want = new Float32Array(rows);
                k.matvec(w, x.subarray(r * cols, (r + 1) * cols), want);
                assert.deepEqual(
                  y.subarray(r * rows, (r + 1) * rows),
                  want,
                  `type ${type} [${rows}, ${cols}] n=${n} row ${r}`,
                );
              }
            }
          }
        }
      } finally {
        await k.close();
      }
    });
  }
}
