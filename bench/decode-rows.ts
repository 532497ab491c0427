// Micro-benchmark of the batched decode product: matvecRows (n one-token rows, each with a
// lone matvec's bits) per weight shape and row count, in microseconds per call and per row.
//   npx tsx bench/decode-rows.ts [--shapes 128x2048,2560x2048,11264x2048,2048x5632] [--n 1,2,4,8]
//     [--threads 1] [--type Q8_0] [--copies 1] [--seconds 0.3] [--json]
// A shape is ROWSxCOLS. A small weight (128x2048, 288 KiB) stays in cache and measures the
// arithmetic alone; the TinyLlama shapes (q/k/v+gate/up-like, o, down) are larger, and with
// --copies K each call takes the next of K copies of the weight, so that with enough copies
// (e.g. 4: 90 MB for 11264x2048) they stream from memory as in a model, not from the L3 cache.
// With one thread the process CPU time is used, so other people's work on a shared machine
// counts less; compare builds in alternated runs (bench/compare-builds.ts is for `tandem bench`).
import { parseArgs } from 'node:util';
import { createKernels, GgmlType, type GgmlTypeName } from '../src/kernels/index.js';
import { randomFloats, randomWeightBytes } from '../src/kernels/testing/random-weights.js';
import { timeIt } from './time-it.js';

const { values } = parseArgs({
  options: {
    shapes: { type: 'string', default: '128x2048,2560x2048,11264x2048,2048x5632' },
    n: { type: 'string', default: '1,2,4,8' },
    threads: { type: 'string', default: '1' },
    type: { type: 'string', default: 'Q8_0' },
    backend: { type: 'string', default: 'native' },
    copies: { type: 'string', default: '1' },
    seconds: { type: 'string', default: '0.3' },
    json: { type: 'boolean', default: false },
  },
});
const seconds = Number(values.seconds);
const type = GgmlType[values.type as GgmlTypeName];

const ns = values.n.split(',').map(Number);
for (const threads of values.threads.split(',').map(Number)) {
  const k = await createKernels({ backend: values.backend as 'wasm' | 'native', threads });
  if (!k.matvecRows) throw new Error(`${values.backend} kernels have no matvecRows`);
  for (const shape of values.shapes.split(',')) {
    const [rows, cols] = shape.split('x').map(Number) as [number, number];
    const ws = Array.from({ length: Number(values.copies) }, (_, i) =>
      k.uploadWeight({ type, rows, cols, data: randomWeightBytes(type, rows, cols, 1 + i) }),
    );
    let next = 0;
    const maxN = Math.max(...ns);
    const x = randomFloats(maxN * cols, 2);
    const y = new Float32Array(maxN * rows);
    for (const n of ns) {
      const t = timeIt(
        () => k.matvecRows!(ws[next++ % ws.length]!, x.subarray(0, n * cols), y.subarray(0, n * rows), n),
        threads,
        seconds,
      );
      const r = {
        type: values.type,
        rows,
        cols,
        threads,
        n,
        call_us: +(t * 1e6).toFixed(1),
        row_us: +((t * 1e6) / n).toFixed(1),
      };
      console.log(
        values.json
          ? JSON.stringify(r)
          : `${shape.padEnd(12)} threads ${threads} n ${String(n).padStart(2)}: ${String(r.call_us).padStart(9)} us/call ${String(r.row_us).padStart(9)} us/row`,
      );
    }
  }
  await k.close();
}
