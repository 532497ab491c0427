import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createKernels } from './index.js';
import { GEMM_TOKENS, GgmlType, type KernelsBackend } from './types.js';
import { randomFloats, randomWeightBytes } from './testing/random-weights.js';
import { loadNativeLib } from './native-lib.js';

/*
 * matvecRows: row t of n one-token products is bit for bit matvec on x[t] (the batched decode
 * round relies on it), for every token count, odd block counts (a tail pair), rows that are
 * not a multiple of the 4-row tile, a real width (2048: many block pairs per row) and a wide
 * one with an odd block count (2144: 67 blocks), on one and two threads. And matmul below GEMM_TOKENS tokens gives each token the same bits (the
 * batched decode round's projections run through it).
 */
for (const backend of ['native', 'wasm'] as KernelsBackend[]) {
  for (const threads of [1, 2]) {
    test(`matvecRows (any n) and matmul (below GEMM_TOKENS) equal matvec per token bit for bit (${backend}, ${threads} threads)`, async (t) => {
      const k = await createKernels({ backend, threads, smallJob: 0 }).catch(() => undefined);
      if (!k) return t.skip(`no ${backend} kernels here`);
      try {
        if (!k.matvecRows) return t.skip(`${backend} has no matvecRows`);
        for (const type of [
          GgmlType.Q8_0,
          GgmlType.Q4_0,
          GgmlType.F32,
          GgmlType.F16,
          GgmlType.BF16,
          GgmlType.Q4_K,
          GgmlType.Q5_K,
          GgmlType.Q6_K,
        ]) {
          const quant32 = type === GgmlType.Q8_0 || type === GgmlType.Q4_0;
          for (const [rows, cols] of [
            [37, quant32 ? 96 : 256],
            [64, 2048],
            [20, quant32 ? 2144 : 2304],
          ] as const) {
            const w = k.uploadWeight({
              type,
              rows,
              cols,
              data: randomWeightBytes(type, rows, cols, rows + cols),
            });
            const x = randomFloats(13 * cols, 7);
            const want = new Float32Array(13 * rows);
            for (let r = 0; r < 13; r++)
              k.matvec(w, x.subarray(r * cols, (r + 1) * cols), want.subarray(r * rows, (r + 1) * rows));
            for (let n = 1; n <= 13; n++) {
              const y = new Float32Array(n * rows);
              k.matvecRows(w, x.subarray(0, n * cols), y, n);
              assert.deepEqual(
                y,
                want.subarray(0, n * rows),
                `matvecRows type ${type} [${rows}, ${cols}] n=${n}`,
              );
              if (n >= GEMM_TOKENS) continue;
              k.matmul(w, x.subarray(0, n * cols), y, n);
              assert.deepEqual(
                y,
                want.subarray(0, n * rows),
                `matmul type ${type} [${rows}, ${cols}] n=${n}`,
              );
            }
          }
        }
      } finally {
        await k.close();
      }
    });
  }
}

/*
 * The grouped layout (AVX2 builds without AVX-512, gemm-avx2.c): a token gets matvec's bits
 * from matmul at any n, GEMM sizes included, for Q8_0 and Q4_0, with partial groups (96, 2144
 * columns) and rows that leave a short tile.
 */
test('grouped Q8_0 / Q4_0: matmul gives each token matvec bits at any n, past GEMM_TOKENS too', async (t) => {
  const lib = await loadNativeLib();
  if (!lib?.prototypes.mm_q8g) return t.skip('this build does not hold Q8_0 / Q4_0 in the grouped layout');
  const k = await createKernels({ backend: 'native', threads: 2, smallJob: 0 });
  try {
    for (const type of [GgmlType.Q8_0, GgmlType.Q4_0]) {
      for (const [rows, cols] of [
        [37, 96],
        [64, 2048],
        [22, 2144],
      ] as const) {
        const w = k.uploadWeight({ type, rows, cols, data: randomWeightBytes(type, rows, cols, rows + 3) });
        const n = 2 * GEMM_TOKENS + 5;
        const x = randomFloats(n * cols, 11);
        const want = new Float32Array(n * rows);
        for (let r = 0; r < n; r++)
          k.matvec(w, x.subarray(r * cols, (r + 1) * cols), want.subarray(r * rows, (r + 1) * rows));
        for (const m of [2, GEMM_TOKENS, GEMM_TOKENS + 1, n]) {
          const y = new Float32Array(m * rows);
          k.matmul(w, x.subarray(0, m * cols), y, m);
          assert.deepEqual(y, want.subarray(0, m * rows), `type ${type} [${rows}, ${cols}] n=${m}`);
        }
      }
    }
  } finally {
    await k.close();
  }
});

/*
 * matmulPlusRows and matmulSwiglu with rows: a matmul of n tokens and one-token rows in one
 * call give the matmul's bits for the first n (GEMM or not) and matvec's for the rest.
 */
for (const backend of ['native', 'wasm'] as KernelsBackend[]) {
  test(`matmulPlusRows and matmulSwiglu with rows equal matmul then matvec per row (${backend})`, async (t) => {
    const k = await createKernels({ backend, threads: 2, smallJob: 0 }).catch(() => undefined);
    if (!k) return t.skip(`no ${backend} kernels here`);
    try {
      if (!k.matmulPlusRows || !k.matmulSwiglu) return t.skip(`${backend} has no matmulPlusRows`);
      for (const type of [GgmlType.Q8_0, GgmlType.Q4_0, GgmlType.F16, GgmlType.Q4_K, GgmlType.Q6_K]) {
        const [rows, cols] = [36, 2048];
        const w = k.uploadWeight({ type, rows, cols, data: randomWeightBytes(type, rows, cols, 5) });
        const x = randomFloats(40 * cols, 9);
        for (const n of [0, 3, 12, 20]) {
          for (const extra of [0, 1, 4, 9]) {
            if (n + extra === 0) continue;
            const total = n + extra;
            const want = new Float32Array(total * rows);
            if (n > 0) k.matmul(w, x.subarray(0, n * cols), want, n);
            for (let r = n; r < total; r++)
              k.matvec(w, x.subarray(r * cols, (r + 1) * cols), want.subarray(r * rows, (r + 1) * rows));
            const y = new Float32Array(total * rows);
            k.matmulPlusRows(w, x.subarray(0, total * cols), y, n, extra);
            assert.deepEqual(y, want, `matmulPlusRows type ${type} n=${n} rows=${extra}`);
            const half = rows / 2;
            const wantS = new Float32Array(total * half);
            if (n > 0) k.matmulSwiglu(w, x.subarray(0, n * cols), wantS, n);
            for (let r = n; r < total; r++)
              k.matmulSwiglu(
                w,
                x.subarray(r * cols, (r + 1) * cols),
                wantS.subarray(r * half, (r + 1) * half),
                1,
              );
            const s = new Float32Array(total * half);
            k.matmulSwiglu(w, x.subarray(0, total * cols), s, n, extra);
            assert.deepEqual(s, wantS, `matmulSwiglu type ${type} n=${n} rows=${extra}`);
          }
        }
      }
    } finally {
      await k.close();
    }
  });
}

/*
 * A row's bits depend neither on the batch size nor on the other rows beside it: the same
 * tokens in shuffled batches of every size (repeats included) give each token the bits of
 * matvec on it alone, at widths with and without a tail group.
 */
for (const backend of ['native', 'wasm'] as KernelsBackend[]) {
  test(`matvecRows: a token's bits do not depend on its batch or its neighbours (${backend})`, async (t) => {
    const k = await createKernels({ backend, threads: 2, smallJob: 0 }).catch(() => undefined);
    if (!k) return t.skip(`no ${backend} kernels here`);
    try {
      if (!k.matvecRows) return t.skip(`${backend} has no matvecRows`);
      for (const [rows, cols] of [
        [24, 2048],
        [12, 5632],
        [8, 608],
      ] as const) {
        const w = k.uploadWeight({
          type: GgmlType.Q8_0,
          rows,
          cols,
          data: randomWeightBytes(GgmlType.Q8_0, rows, cols, cols),
        });
        const tokens = 6;
        const x = randomFloats(tokens * cols, 3);
        const alone = new Float32Array(tokens * rows);
        for (let i = 0; i < tokens; i++)
          k.matvec(w, x.subarray(i * cols, (i + 1) * cols), alone.subarray(i * rows, (i + 1) * rows));
        let seed = 11;
        const next = (m: number): number => {
          seed = (seed * 1103515245 + 12345) % 2147483648;
          return seed % m;
        };
        for (let n = 1; n <= 17; n++) {
          const pick = Array.from({ length: n }, () => next(tokens));
          const xb = new Float32Array(n * cols);
          pick.forEach((i, r) => xb.set(x.subarray(i * cols, (i + 1) * cols), r * cols));
          const y = new Float32Array(n * rows);
          k.matvecRows(w, xb, y, n);
          pick.forEach((i, r) =>
            assert.deepEqual(
              y.subarray(r * rows, (r + 1) * rows),
              alone.subarray(i * rows, (i + 1) * rows),
              `[${rows}, ${cols}] token ${i} at row ${r} of ${n}`,
            ),
          );
        }
      }
    } finally {
      await k.close();
    }
  });
}
