// The matmul work of one TinyLlama-1.1B-shaped token (22 layers of q, k, v, o, gate, up, down
// plus the output head), timed through the kernels alone: an upper bound for the engine's
// decode and prefill tokens/s, beside llama.cpp's figures from NOTES.md.
//   npx tsx bench/kernels-model.ts [--type Q8_0] [--threads 1,2] [--layers 22] [--prefill 128] [--tokens 8] [--json]
import { parseArgs } from 'node:util';
import { createKernels, GgmlType, type GgmlTypeName, type Weight } from '../src/kernels/index.js';
import { randomFloats, randomWeightBytes } from '../src/kernels/testing/random-weights.js';

const { values } = parseArgs({
  options: {
    type: { type: 'string', default: 'Q8_0' },
    threads: { type: 'string', default: '1,2' },
    backend: { type: 'string', default: 'native' },
    layers: { type: 'string', default: '22' },
    prefill: { type: 'string', default: '128' },
    tokens: { type: 'string', default: '8' },
    json: { type: 'boolean', default: false },
  },
});
const anchors: Record<number, { decode: number; prefill: number }> = {
  1: { decode: 27.7, prefill: 82 },
  2: { decode: 36.4, prefill: 159 },
};
const type = GgmlType[values.type as GgmlTypeName];
const layers = Number(values.layers);
const dim = 2048;
const ff = 5632;
const kv = 256;
const vocab = 32000;
const shapes: [number, number][] = [
  [dim, dim],
  [kv, dim],
  [kv, dim],
  [dim, dim],
  [ff, dim],
  [ff, dim],
  [dim, ff],
];
// One random buffer per shape, uploaded once per layer: distinct memory, realistic traffic.
const sources = shapes.map(([r, c], i) => randomWeightBytes(type, r, c, i + 1));
const head = randomWeightBytes(type, vocab, dim, 99);

for (const threads of values.threads.split(',').map(Number)) {
  const k = await createKernels({ backend: values.backend as 'wasm' | 'native', threads });
  const ws: Weight[] = [];
  for (let l = 0; l < layers; l++)
    shapes.forEach(([rows, cols], i) =>
      ws.push(k.uploadWeight({ type, rows, cols, data: sources[i] as Uint8Array })),
    );
  const out = k.uploadWeight({ type, rows: vocab, cols: dim, data: head });
  const n = Number(values.prefill);
  const x = randomFloats(n * ff, 3);
  const y = new Float32Array(n * vocab);
  const token = (m: number): void => {
    for (const w of ws) {
      if (m === 1) k.matvec(w, x, y);
      else k.matmul(w, x, y, m);
    }
    k.matvec(out, x, y);
  };
  token(1);
  const tokens = Number(values.tokens);
  // With one thread also report tokens per CPU-second: on a shared machine wall time mostly
  // measures the other processes.
  let cpu0 = process.cpuUsage();
  let start = performance.now();
  for (let i = 0; i < tokens; i++) token(1);
  const decode = tokens / ((performance.now() - start) / 1000);
  let cpu = process.cpuUsage(cpu0);
  const decodeCpu = tokens / ((cpu.user + cpu.system) / 1e6);
  cpu0 = process.cpuUsage();
  start = performance.now();
  token(n);
  const prefill = n / ((performance.now() - start) / 1000);
  cpu = process.cpuUsage(cpu0);
  const prefillCpu = n / ((cpu.user + cpu.system) / 1e6);
  const a = anchors[threads];
  const row = {
    engine: 'tandem-kernels',
    type: values.type,
    threads,
    decode_tok_s: +decode.toFixed(1),
    prefill_tok_s: +prefill.toFixed(1),
    ...(threads === 1
      ? { decode_tok_cpu_s: +decodeCpu.toFixed(1), prefill_tok_cpu_s: +prefillCpu.toFixed(1) }
      : {}),
    llama_decode_tok_s: a?.decode,
    llama_prefill_tok_s: a?.prefill,
  };
  console.log(
    values.json
      ? JSON.stringify(row)
      : `${values.type} threads=${threads}: decode ${row.decode_tok_s} tok/s (llama.cpp ${a?.decode ?? '?'}), prefill ${row.prefill_tok_s} tok/s (llama.cpp ${a?.prefill ?? '?'})${threads === 1 ? `; per CPU-second: decode ${row.decode_tok_cpu_s}, prefill ${row.prefill_tok_cpu_s}` : ''}`,
  );
  await k.close();
}
