import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createKernels } from './index.js';
import { GEMM_TOKENS, GgmlType, type GgmlTypeId, type Kernels, type Weight } from './types.js';
import { randomFloats, randomWeightBytes } from './testing/random-weights.js';

/*
 * The native K-quant kernels below GEMM_TOKENS (mm_kv on AVX-512 or AVX2; the wasm ones where
 * there is no native build) against the TypeScript reference twin, 1..GEMM_TOKENS - 1 tokens, on random weights and
 * on the extremes: every quant at its largest with the largest scales and mins (Q6_K: scales
 * -128, the most negative), activations with an all-zero super-block and with one outlier
 * (most quants round to 0 or +-1). Tolerance: 2e-5 of the output's magnitude; the
 * super-block sums are exact integers on both sides, only the float accumulation of the
 * super-blocks differs.
 */
const kTypes: GgmlTypeId[] = [GgmlType.Q4_K, GgmlType.Q5_K, GgmlType.Q6_K];

/** The quant bytes (not the f16 d/dmin) of every super-block set to their largest patterns. */
function extremeWeights(type: GgmlTypeId, rows: number, cols: number): Uint8Array {
  const b = randomWeightBytes(type, rows, cols, 11);
  const bytes = type === GgmlType.Q6_K ? 210 : type === GgmlType.Q5_K ? 176 : 144;
  for (let o = 0; o < b.length; o += bytes) {
    if (type === GgmlType.Q6_K) {
      b.fill(0xff, o, o + 192);
      b.fill(0x80, o + 192, o + 208);
    } else b.fill(0xff, o + 4, o + bytes);
  }
  return b;
}

function activations(kind: 'random' | 'zero-block' | 'outlier', n: number, cols: number): Float32Array {
  const x = randomFloats(n * cols, 5 + cols);
  for (let t = 0; t < n; t++) {
    if (kind === 'zero-block') x.fill(0, t * cols, t * cols + 256);
    if (kind === 'outlier') x[t * cols + ((t * 97) % cols)] = (t & 1 ? -1 : 1) * 1000;
  }
  return x;
}

type Case = {
  type: GgmlTypeId;
  rows: number;
  cols: number;
  n: number;
  w: Weight;
  x: Float32Array;
  y: Float32Array;
  label: string;
};

/**
 * Every K-quant type x shape x weight kind (random with `seed`, extreme) x activation kind x
 * token count in `counts`: the native product `run` against the reference within 2e-5 of the
 * output's magnitude, then `more` on the case. False where no native kernels exist.
 */
async function againstReference(
  shapes: readonly (readonly [number, number])[],
  seed: number,
  counts: readonly number[],
  run: (k: Kernels, c: Case) => void,
  more?: (k: Kernels, c: Case) => void,
): Promise<boolean> {
  const k = await createKernels({ backend: 'native', threads: 2, smallJob: 0 }).catch(() => undefined);
  if (!k) return false;
  const ref = await createKernels({ backend: 'reference' });
  try {
    for (const type of kTypes)
      for (const [rows, cols] of shapes)
        for (const wkind of ['random', 'extreme'] as const) {
          const data =
            wkind === 'random'
              ? randomWeightBytes(type, rows, cols, rows * seed + type)
              : extremeWeights(type, rows, cols);
          const w = k.uploadWeight({ type, rows, cols, data });
          const wr = ref.uploadWeight({ type, rows, cols, data });
          for (const xkind of ['random', 'zero-block', 'outlier'] as const)
            for (const n of counts) {
              const label = `type ${type} [${rows}, ${cols}] ${wkind} weights, ${xkind} x, n=${n}`;
              const c: Case = {
                type,
                rows,
                cols,
                n,
                w,
                x: activations(xkind, n, cols),
                y: new Float32Array(n * rows),
                label,
              };
              run(k, c);
              const want = new Float32Array(n * rows);
              ref.matmul(wr, c.x, want, n);
              const scale = want.reduce((m, v) => Math.max(m, Math.abs(v)), 0) || 1;
              for (let i = 0; i < c.y.length; i++)
                assert.ok(
                  Math.abs((c.y[i] as number) - (want[i] as number)) <= 2e-5 * scale,
                  `${label}, out ${i}: ${c.y[i]} vs ${want[i]}`,
                );
              more?.(k, c);
            }
        }
  } finally {
    await k.close();
    await ref.close();
  }
  return true;
}

test('native K-quant matmul below GEMM_TOKENS equals the reference (random and extreme weights and activations)', async (t) => {
  const below: number[] = [];
  for (let n = 1; n < GEMM_TOKENS; n += n < 4 ? 1 : 3) below.push(n);
  const ran = await againstReference(
    [
      [37, 256],
      [70, 2048],
    ],
    3,
    below,
    (k, c) => (c.n === 1 ? k.matvec(c.w, c.x, c.y) : k.matmul(c.w, c.x, c.y, c.n)),
  );
  if (!ran) t.skip('no native kernels here');
});

/*
 * The K-quant GEMM (mm_kt from GEMM_TOKENS tokens on, where the build has it): the same
 * reference and tolerance as above, on an odd count of 4-row tiles (36 rows: the last thread
 * takes a lone tile) and on 70 rows, with token counts around the GEMM's 16-token groups; and a
 * token's outputs carry the same bits whichever lane and group of the batch it lands in
 * (tokens 1..n-1 run again as a batch of their own, one lane over).
 */
test('native K-quant GEMM equals the reference, and a token has the same bits at any place in the batch', async (t) => {
  const ran = await againstReference(
    [
      [36, 256],
      [70, 2048],
    ],
    5,
    [GEMM_TOKENS + 1, 16, 17, 33],
    (k, c) => k.matmul(c.w, c.x, c.y, c.n),
    (k, c) => {
      const shifted = new Float32Array((c.n - 1) * c.rows);
      k.matmul(c.w, c.x.subarray(c.cols), shifted, c.n - 1);
      assert.deepEqual(shifted, c.y.subarray(c.rows), `${c.label}: tokens 1..${c.n - 1} alone`);
    },
  );
  if (!ran) t.skip('no native kernels here');
});
