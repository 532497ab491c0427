// Micro-benchmark of the kernels: matvec (decode) and matmul (prefill) GFLOP/s and GB/s of
// weights per weight type and thread count, on TinyLlama-1.1B-shaped matrices.
//   npx tsx bench/kernels.ts [--threads 1,2] [--types Q8_0,Q4_K] [--rows 5632] [--cols 2048] [--n 128] [--seconds 1] [--json]
// Anchors (NOTES.md, this class of machine, one thread): C AVX2/VNNI int8 matvec 65-95 GFLOP/s;
// llama.cpp TinyLlama Q8_0 decode 27.7 tok/s (1 thread) ~ 61 GFLOP/s of matvec work.
import { parseArgs } from 'node:util';
import { createKernels, GgmlType, rowBytes, type GgmlTypeName } from '../src/kernels/index.js';
import { randomFloats, randomWeightBytes } from '../src/kernels/testing/random-weights.js';
import { timeIt } from './time-it.js';

const { values } = parseArgs({
  options: {
    threads: { type: 'string', default: '1,2' },
    backend: { type: 'string', default: 'native' },
    types: { type: 'string', default: 'Q8_0,Q4_0,Q4_K,Q5_K,Q6_K,F16,F32' },
    rows: { type: 'string', default: '5632' },
    cols: { type: 'string', default: '2048' },
    n: { type: 'string', default: '64' },
    seconds: { type: 'string', default: '0.5' },
    json: { type: 'boolean', default: false },
  },
});

const rows = Number(values.rows);
const cols = Number(values.cols);
const n = Number(values.n);
const seconds = Number(values.seconds);

const results: Record<string, unknown>[] = [];
for (const threads of values.threads.split(',').map(Number)) {
  const k = await createKernels({ backend: values.backend as 'wasm' | 'native', threads });
  for (const name of values.types.split(',') as GgmlTypeName[]) {
    const type = GgmlType[name];
    const data = randomWeightBytes(type, rows, cols, 1);
    const w = k.uploadWeight({ type, rows, cols, data });
    const bytes = rows * rowBytes(type, cols);
    const x = randomFloats(n * cols, 2);
    const y = new Float32Array(n * rows);
    const tv = timeIt(() => k.matvec(w, x, y), threads, seconds);
    const tm = timeIt(() => k.matmul(w, x, y, n), threads, seconds);
    const r = {
      type: name,
      rows,
      cols,
      threads,
      matvec_us: +(tv * 1e6).toFixed(1),
      matvec_gflops: +((2 * rows * cols) / tv / 1e9).toFixed(1),
      matvec_gbs: +(bytes / tv / 1e9).toFixed(1),
      matmul_n: n,
      matmul_gflops: +((2 * rows * cols * n) / tm / 1e9).toFixed(1),
    };
    results.push(r);
    if (values.json) console.log(JSON.stringify(r));
  }
  await k.close();
}
if (!values.json) {
  console.log(
    `kernels: [${rows}, ${cols}] weights, matmul n=${n} (anchor: C AVX2/VNNI int8 matvec 65-95 GFLOP/s per thread)`,
  );
  console.log('type   threads  matvec us  matvec GFLOP/s  weights GB/s  matmul GFLOP/s');
  for (const r of results) {
    console.log(
      `${String(r.type).padEnd(6)} ${String(r.threads).padStart(7)} ${String(r.matvec_us).padStart(10)} ${String(r.matvec_gflops).padStart(15)} ${String(r.matvec_gbs).padStart(13)} ${String(r.matmul_gflops).padStart(15)}`,
    );
  }
}
