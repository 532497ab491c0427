// Child process: runs GGUF models in llama.cpp (node-llama-cpp, CPU, F32 KV cache) from token
// ids and prints, per job, the logits of every greedy step and the tokens of llama.cpp's own
// greedy sampler. A llama.cpp assertion aborts the whole process, hence the child.
import { getLlama, LlamaLogLevel, type Token } from 'node-llama-cpp';
import type { OracleJob, OracleResult } from './llama-cpp-oracle.js';

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function dense(map: Map<Token, number> | undefined, vocab: number): Float32Array {
  const out = new Float32Array(vocab).fill(-Infinity);
  for (const [token, value] of map ?? []) out[token] = value;
  return out;
}

function argmax(x: Float32Array): number {
  let best = 0;
  for (let i = 1; i < x.length; i++) if (x[i]! > x[best]!) best = i;
  return best;
}

const jobs = JSON.parse(await readStdin()) as OracleJob[];
const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
const results: OracleResult[] = [];
for (const job of jobs) {
  const model = await llama.loadModel({ modelPath: job.modelPath, gpuLayers: 0 });
  const context = await model.createContext({
    contextSize: job.contextSize,
    sequences: 2,
    threads: job.threads ?? 1,
    experimentalKvCacheKeyType: 'F32',
    experimentalKvCacheValueType: 'F32',
    // Flash attention (node-llama-cpp's default) rounds through f16 on the CPU: ~3e-4 off.
    flashAttention: false,
  });
  const n = job.vocabSize;
  // Step by step, with the full logits of every step.
  const seq = context.getSequence();
  const steps: Float32Array[] = [];
  let input: (Token | [Token, { generateNext: { logits: true } }])[] = job.prompt.map((t, i) =>
    i === job.prompt.length - 1 ? [t as Token, { generateNext: { logits: true } }] : (t as Token),
  );
  for (let s = 0; s < job.steps; s++) {
    const out = await seq.controlledEvaluate(input);
    const logits = dense(out[out.length - 1]?.next.logits, n);
    steps.push(logits);
    input = [[argmax(logits) as Token, { generateNext: { logits: true } }]];
  }
  // llama.cpp's own greedy sampler, on a fresh sequence.
  const greedySeq = context.getSequence();
  const greedy: number[] = [];
  for await (const token of greedySeq.evaluate(job.prompt as Token[], { temperature: 0 })) {
    greedy.push(token);
    if (greedy.length >= job.steps) break;
  }
  const all = new Float32Array(steps.length * n);
  steps.forEach((l, i) => all.set(l, i * n));
  results.push({ logits: Buffer.from(all.buffer).toString('base64'), greedy });
  await context.dispose();
  await model.dispose();
}
process.stdout.write(JSON.stringify(results));
await llama.dispose();
