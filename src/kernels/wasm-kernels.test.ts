import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createKernels } from './index.js';
import { ReferenceKernels } from './reference.js';
import { GgmlType, type GgmlTypeId, type Kernels } from './types.js';
import { randomFloats, randomWeightBytes } from './testing/random-weights.js';
import { blockInfo } from './ggml-blocks.js';
import { isTandemError } from '../errors/index.js';
import { loadNativeLib, nativeUnavailableReason } from './native-lib.js';

/**
 * The WebAssembly kernels against the reference twin on random inputs (fixed seeds).
 * Both quantise x identically and sum the same integers per block; only the order of the
 * float accumulation differs, so results agree to TOL relative to the output's magnitude.
 */
const TOL = 2e-5;
const ref = new ReferenceKernels();
const pools = new Map<string, Kernels>();
after(async () => {
  for (const k of pools.values()) await k.close();
});

async function kernels(backend: 'wasm' | 'native', threads: number): Promise<Kernels> {
  let k = pools.get(`${backend}/${threads}`);
  if (!k) {
    k = await createKernels({ backend, threads, smallJob: 0 });
    pools.set(`${backend}/${threads}`, k);
  }
  return k;
}

const wasm = (threads: number): Promise<Kernels> => kernels('wasm', threads);
const native = await loadNativeLib();

function assertClose(got: Float32Array, want: Float32Array, tol: number, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  let mag = 0;
  for (const v of want) mag = Math.max(mag, Math.abs(v));
  for (let i = 0; i < want.length; i++) {
    const d = Math.abs((got[i] as number) - (want[i] as number));
    if (!(d <= tol * mag + 1e-7))
      assert.fail(`${what}: element ${i}: ${got[i]} vs ${want[i]} (|diff| ${d}, magnitude ${mag})`);
  }
}

const types: [string, GgmlTypeId][] = Object.entries(GgmlType);

const cases = [
  ['wasm', 1],
  ['wasm', 2],
  ['wasm', 3],
  ['native', 1],
  ['native', 3],
] as const;
for (const [backend, threads] of cases) {
  const skip = backend === 'native' && !native ? `no native kernels here: ${nativeUnavailableReason}` : false;
  test(
    `${backend}: matvec and matmul match the reference for every weight type (${threads} threads)`,
    { skip },
    async () => {
      const k = await kernels(backend, threads);
      let seed = 100 * threads;
      for (const [name, type] of types) {
        const block = blockInfo[type].elements;
        const colChoices = block === 1 ? [7, 64, 130] : block === 32 ? [32, 96, 288] : [256, 768];
        for (const cols of colChoices) {
          for (const rows of [1, 5, 13, 36]) {
            const data = randomWeightBytes(type, rows, cols, seed++);
            const wr = ref.uploadWeight({ type, rows, cols, data });
            const ww = k.uploadWeight({ type, rows, cols, data });
            for (const n of [1, 3, 6, 17]) {
              const x = randomFloats(n * cols, seed++, 2);
              if (n > 1) x.fill(0, cols, 2 * cols); // an all-zero token exercises amax = 0
              const want = new Float32Array(n * rows);
              const got = new Float32Array(n * rows);
              ref.matmul(wr, x, want, n);
              k.matmul(ww, x, got, n);
              assertClose(got, want, TOL, `${name} [${rows}, ${cols}] n=${n}`);
            }
            const er = new Float32Array(cols);
            const ew = new Float32Array(cols);
            ref.embedRow(wr, rows - 1, er);
            k.embedRow(ww, rows - 1, ew);
            assert.deepEqual(ew, er, `${name} embedRow`);
          }
        }
      }
    },
  );
}

test('column and row slices match the reference (tensor-parallel shards)', async () => {
  const k = await wasm(2);
  for (const [name, type] of [
    ['Q8_0', GgmlType.Q8_0],
    ['Q4_K', GgmlType.Q4_K],
    ['F16', GgmlType.F16],
  ] as const) {
    const rows = 10;
    const cols = 1024;
    const data = randomWeightBytes(type, rows, cols, 7);
    const slice = { type, rows, cols, data, rowStart: 3, rowCount: 6, colStart: 512, colCount: 512 };
    const wr = ref.uploadWeight(slice);
    const ww = k.uploadWeight(slice);
    const x = randomFloats(512, 8);
    const want = new Float32Array(6);
    const got = new Float32Array(6);
    ref.matvec(wr, x, want);
    k.matvec(ww, x, got);
    assertClose(got, want, TOL, `${name} slice`);
  }
});

test('small jobs stay on the calling thread and agree with pooled ones', async () => {
  const pooled = await wasm(2);
  const k = await createKernels({ backend: 'wasm', threads: 2 });
  try {
    const data = randomWeightBytes(GgmlType.Q8_0, 8, 64, 77);
    const x = randomFloats(64, 78);
    const a = new Float32Array(8);
    const b = new Float32Array(8);
    pooled.matvec(pooled.uploadWeight({ type: GgmlType.Q8_0, rows: 8, cols: 64, data }), x, a);
    k.matvec(k.uploadWeight({ type: GgmlType.Q8_0, rows: 8, cols: 64, data }), x, b);
    assert.deepEqual(b, a);
  } finally {
    await k.close();
  }
});

test('typed errors: a tensor larger than a memory, use after close', async () => {
  const k = await createKernels({ backend: 'wasm', threads: 2, arenaBytes: 1 << 20 });
  const data = randomWeightBytes(GgmlType.Q8_0, 64, 32 * 1024, 5);
  assert.throws(
    () => k.uploadWeight({ type: GgmlType.Q8_0, rows: 64, cols: 32 * 1024, data }),
    (e) => isTandemError(e, 'KERNELS_OUT_OF_MEMORY'),
  );
  const w = k.uploadWeight({ type: GgmlType.Q8_0, rows: 4, cols: 64, data });
  await k.close();
  assert.throws(
    () => k.matvec(w, new Float32Array(64), new Float32Array(4)),
    (e) => isTandemError(e, 'KERNELS_CLOSED'),
  );
});

test('weights past the arena size spill into further memories and still compute', async () => {
  const k = await createKernels({ backend: 'wasm', threads: 2, arenaBytes: 8 << 20, smallJob: 0 });
  try {
    const rows = 1024;
    const cols = 2048;
    const weights = [0, 1, 2, 3].map((i) => {
      const data = randomWeightBytes(GgmlType.Q8_0, rows, cols, 50 + i);
      return {
        r: ref.uploadWeight({ type: GgmlType.Q8_0, rows, cols, data }),
        w: k.uploadWeight({ type: GgmlType.Q8_0, rows, cols, data }),
      };
    });
    assert.ok((k as unknown as { arenas: number }).arenas >= 2, 'expected several memories');
    const x = randomFloats(cols, 9);
    for (const { r, w } of weights) {
      const want = new Float32Array(rows);
      const got = new Float32Array(rows);
      ref.matvec(r, x, want);
      k.matvec(w, x, got);
      assertClose(got, want, TOL, 'spanning');
    }
  } finally {
    await k.close();
  }
});

const attentionCases: (readonly ['wasm' | 'native', number])[] = [
  ['wasm', 1],
  ['wasm', 2],
  ...(native
    ? ([
        ['native', 1],
        ['native', 2],
      ] as const)
    : []),
];

test('swiglu matches the reference (pooled, odd lengths, out aliasing gate)', async () => {
  for (const [backend, threads] of attentionCases) {
    const k = await kernels(backend, threads);
    // an arena exists once a weight is uploaded; before that swiglu runs the reference
    k.uploadWeight({ type: GgmlType.F32, rows: 1, cols: 7, data: new Uint8Array(28) });
    for (const len of [1, 37, 5000]) {
      const g = randomFloats(len, len, 8);
      const u = randomFloats(len, len + 1, 2);
      const want = new Float32Array(len);
      ref.swiglu(g, u, want);
      k.swiglu(g, u, g);
      assertClose(g, want, 1e-6, `${backend} swiglu len=${len} threads=${threads}`);
    }
  }
});

for (const cacheType of ['f32', 'f16'] as const) {
  // Groups of 3, 8 and 5 query heads a kv head (the native kernel takes them in chunks of 3,
  // 4 + 4 and 2 + 3) and 1; contexts across several 16-position blocks and their tails.
  test(`attention over a ${cacheType} KV cache matches the reference (GQA, causal, prefill then decode, head sizes 12, 64, 128)`, async () => {
    const shapes = [
      [6, 2],
      [16, 2],
      [10, 2],
      [3, 3],
    ] as const;
    for (const [[backend, threads], headDim, [heads, kvHeads]] of attentionCases.flatMap((c) =>
      [12, 64, 128].flatMap((hd) => shapes.map((s) => [c, hd, s] as const)),
    )) {
      const k = await kernels(backend, threads);
      const opts = { layers: 2, kvHeads, headDim, maxSeq: 60, type: cacheType };
      const cr = ref.createKvCache(opts);
      const cw = k.createKvCache(opts);
      let seed = 900;
      let pos = 0;
      for (const n of [17, 1, 1, 5, 30]) {
        const kv = randomFloats(n * opts.kvHeads * opts.headDim, seed++);
        const vv = randomFloats(n * opts.kvHeads * opts.headDim, seed++);
        ref.kvStore(cr, 1, pos, kv, vv, n);
        k.kvStore(cw, 1, pos, kv, vv, n);
        const q = randomFloats(n * heads * opts.headDim, seed++, 3);
        const want = new Float32Array(q.length);
        const got = new Float32Array(q.length);
        ref.attention(cr, q, want, { layer: 1, heads, pos0: pos, n });
        k.attention(cw, q, got, { layer: 1, heads, pos0: pos, n });
        // f16 values carry 11 significant bits: a probability rounded to f16 after a different
        // normalisation (e / sum against e * (1 / sum)) can land one f16 step (2^-11, ~4.9e-4
        // relative) away, and over tens of positions such steps add up past 1e-4.
        assertClose(
          got,
          want,
          cacheType === 'f16' ? 5e-4 : 1e-5,
          `${backend} attention ${cacheType} hd=${headDim} heads=${heads}/${kvHeads} pos0=${pos} n=${n} threads=${threads}`,
        );
        pos += n;
      }
    }
  });
}

test('rope with the cached angle table equals the reference bit for bit (normal, neox, partial, freq factors, growing positions)', async () => {
  for (const [backend, threads] of attentionCases)
    await ropeMatches(await kernels(backend, threads), `${backend}/${threads}`);
});

async function ropeMatches(k: Kernels, what: string): Promise<void> {
  k.uploadWeight({ type: GgmlType.F32, rows: 1, cols: 7, data: new Uint8Array(28) });
  const params = [
    { headDim: 16, style: 'normal', freqBase: 10000 },
    { headDim: 16, ropeDim: 8, style: 'neox', freqBase: 1000000, freqScale: 0.5 },
    { headDim: 8, style: 'normal', freqBase: 500000, freqFactors: new Float32Array([1, 2, 4, 8]) },
  ] as const;
  for (const p of params) {
    let seed = 300;
    for (const positions of [[0, 1, 2], [3], [200, 7, 90], [5000]]) {
      const pos = new Int32Array(positions);
      const x = randomFloats(positions.length * 3 * p.headDim, seed++, 4);
      const want = x.slice();
      ref.rope(want, pos, 3, p);
      k.rope(x, pos, 3, p);
      assert.deepEqual(x, want, `${what} ${p.style} ${positions.join(',')}`);
    }
  }
}

test("rmsNorm equals the reference bit for bit (llama.cpp's float chain; odd widths, in place)", async () => {
  for (const [backend, threads] of attentionCases) {
    const k = await kernels(backend, threads);
    k.uploadWeight({ type: GgmlType.F32, rows: 1, cols: 7, data: new Uint8Array(28) });
    let seed = 500;
    for (const [n, dim] of [
      [1, 7],
      [3, 64],
      [5, 2048],
      [2, 100],
    ] as const) {
      const x = randomFloats(n * dim, seed++, 3);
      const w = randomFloats(dim, seed++, 1);
      const want = new Float32Array(n * dim);
      ref.rmsNorm(x, w, 1e-5, want, n);
      const got = new Float32Array(n * dim);
      k.rmsNorm(x, w, 1e-5, got, n);
      assert.deepEqual(got, want, `${backend} n=${n} dim=${dim} threads=${threads}`);
      k.rmsNorm(x, w, 1e-5, x, n);
      assert.deepEqual(x, want, `${backend} in place n=${n} dim=${dim}`);
    }
  }
});

test('matmulSwiglu equals the matmul then SwiGLU of the reference (stacked gate/up rows, odd halves, 1 and 17 tokens)', async () => {
  for (const [backend, threads] of attentionCases) {
    const k = await kernels(backend, threads);
    let seed = 700;
    for (const [type, cols] of [
      [GgmlType.Q8_0, 96],
      [GgmlType.Q4_K, 256],
      [GgmlType.F16, 40],
    ] as const) {
      for (const half of [5, 8]) {
        const data = randomWeightBytes(type, 2 * half, cols, seed++);
        const wr = ref.uploadWeight({ type, rows: 2 * half, cols, data });
        const ww = k.uploadWeight({ type, rows: 2 * half, cols, data });
        for (const n of [1, 17]) {
          const x = randomFloats(n * cols, seed++, 2);
          const y = new Float32Array(n * 2 * half);
          ref.matmul(wr, x, y, n);
          const want = new Float32Array(n * half);
          for (let t = 0; t < n; t++)
            ref.swiglu(
              y.subarray(2 * t * half, (2 * t + 1) * half),
              y.subarray((2 * t + 1) * half, (2 * t + 2) * half),
              want.subarray(t * half, (t + 1) * half),
            );
          const got = new Float32Array(n * half);
          k.matmulSwiglu!(ww, x, got, n);
          assertClose(got, want, TOL, `${backend}/${threads} type ${type} half=${half} n=${n}`);
        }
      }
    }
  }
});

test('memory past its 2^31st byte: weights, KV caches and scratch there compute like the reference', async () => {
  for (const [backend, threads] of attentionCases) {
    const k = await createKernels({ backend, threads, smallJob: 0 });
    try {
      // 2 GiB of KV cache first (never written: the pages stay untouched), so that everything
      // after it sits above 2^31, where a signed shift of an address turns negative
      k.createKvCache({ layers: 1, kvHeads: 16, headDim: 128, maxSeq: 1 << 17, type: 'f32' });
      let seed = 3000;
      for (const [name, type, cols] of [
        ['Q8_0', GgmlType.Q8_0, 288],
        ['Q4_K', GgmlType.Q4_K, 512],
        ['F16', GgmlType.F16, 130],
      ] as const) {
        const rows = 13;
        const data = randomWeightBytes(type, rows, cols, seed++);
        const wr = ref.uploadWeight({ type, rows, cols, data });
        const ww = k.uploadWeight({ type, rows, cols, data });
        for (const n of [1, 17]) {
          const x = randomFloats(n * cols, seed++, 2);
          const want = new Float32Array(n * rows);
          const got = new Float32Array(n * rows);
          ref.matmul(wr, x, want, n);
          k.matmul(ww, x, got, n);
          assertClose(got, want, TOL, `${backend} ${name} n=${n} above 2 GiB`);
        }
        const er = new Float32Array(cols);
        const ew = new Float32Array(cols);
        ref.embedRow(wr, rows - 1, er);
        k.embedRow(ww, rows - 1, ew);
        assert.deepEqual(ew, er, `${backend} ${name} embedRow above 2 GiB`);
      }
      const opts = { layers: 1, kvHeads: 2, headDim: 64, maxSeq: 32, type: 'f32' } as const;
      const cr = ref.createKvCache(opts);
      const cw = k.createKvCache(opts);
      const n = 5;
      const kv = randomFloats(n * 2 * 64, seed++);
      const vv = randomFloats(n * 2 * 64, seed++);
      ref.kvStore(cr, 0, 0, kv, vv, n);
      k.kvStore(cw, 0, 0, kv, vv, n);
      const q = randomFloats(n * 4 * 64, seed++, 3);
      const want = new Float32Array(q.length);
      const got = new Float32Array(q.length);
      ref.attention(cr, q, want, { layer: 0, heads: 4, pos0: 0, n });
      k.attention(cw, q, got, { layer: 0, heads: 4, pos0: 0, n });
      assertClose(got, want, 1e-5, `${backend} attention above 2 GiB`);
      const x = randomFloats(3 * 64, seed++, 3);
      const w = randomFloats(64, seed++);
      const normWant = new Float32Array(x.length);
      const normGot = new Float32Array(x.length);
      ref.rmsNorm(x, w, 1e-5, normWant, 3);
      k.rmsNorm(x, w, 1e-5, normGot, 3);
      assert.deepEqual(normGot, normWant, `${backend} rmsNorm above 2 GiB`);
    } finally {
      await k.close();
    }
  }
});
