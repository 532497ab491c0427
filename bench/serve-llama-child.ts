// Child process of `tandem bench serve --anchors`: llama.cpp (node-llama-cpp, CPU) with as
// many sequences in one context as the level has clients, each client evaluating its prompts
// greedily, `rounds` of them one after the other; node-llama-cpp batches the sequences' steps together. Prints the
// timings as one JSON line.
import { performance } from 'node:perf_hooks';
import type { LlamaServeJob, RequestTiming } from './serve.js';

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

const job = JSON.parse(await readStdin()) as LlamaServeJob;
const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: job.model, gpuLayers: 0 });
const perSequence = (job.prompts[0]?.length ?? 0) + job.maxTokens + 8;
const context = await model.createContext({
  contextSize: job.concurrency * perSequence,
  sequences: job.concurrency,
  threads: job.threads,
  batchSize: 512,
});

async function client(i: number): Promise<RequestTiming[]> {
  const seq = context.getSequence();
  const timings: RequestTiming[] = [];
  for (let r = 0; r < job.rounds; r++) {
    await seq.clearHistory();
    const startMs = performance.now();
    const tokenMs: number[] = [];
    for await (const _token of seq.evaluate(job.prompts[i * job.rounds + r] as never[], { temperature: 0 })) {
      tokenMs.push(performance.now());
      if (tokenMs.length >= job.maxTokens) break;
    }
    timings.push({ startMs, tokenMs, endMs: performance.now(), tokens: tokenMs.length });
  }
  return timings;
}

// warm-up: the first evaluation pays one-time costs (as the tandem side's first request)
const warm = context.getSequence();
for await (const _token of warm.evaluate(job.prompts[0] as never[], { temperature: 0 })) break;
warm.dispose();

const start = performance.now();
const timings = (await Promise.all(Array.from({ length: job.concurrency }, (_, i) => client(i)))).flat();
const wallMs = performance.now() - start;
process.stdout.write(JSON.stringify({ timings, wallMs }) + '\n');
await context.dispose();
await model.dispose();
await llama.dispose();
