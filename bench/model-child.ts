// Child process of `tandem bench model`: runs one engine (tandem or llama.cpp through
// node-llama-cpp) on a model file from token ids and prints one JSON result line. Each engine
// gets its own process so its peak RSS is its own (and a llama.cpp assertion cannot kill the
// parent).
import { performance } from 'node:perf_hooks';
import type { ModelBenchJob, ModelBenchResult } from './model.js';
import type { Forwarder, SequenceCache } from '../src/engine/index.js';
import { report } from '../src/cli/main.js';
import { joulesPerToken, openPowerMeter, type PowerProbe } from '../src/util/power/index.js';

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function peakRssMb(): number {
  return process.resourceUsage().maxRSS / 1024;
}

/** tandem on the kernels the job names (the CPU default without one). */
async function openTandem(job: ModelBenchJob): Promise<{
  model: Forwarder & { newSession(o: { contextLength: number }): SequenceCache };
  backend: string;
  close(): Promise<void>;
}> {
  const { chooseKernels } = await import('../src/kernels/webgpu/index.js');
  const { gpuRefusalFor, openGpuModel } = await import('../src/cli/webgpu-model.js');
  const contextLength = job.prompt.length + job.tokens + 8;
  const chosen = await chooseKernels(job.kernels, gpuRefusalFor(job.model, contextLength));
  if (chosen.backend === 'webgpu') {
    const gpu = await openGpuModel(job.model, chosen.device, { tokenizer: false });
    return { model: gpu, backend: `webgpu on ${chosen.adapter}`, close: () => gpu.close() };
  }
  const { openModel } = await import('../src/engine/index.js');
  const opened = await openModel(job.model, {
    threads: job.threads,
    tokenizer: false,
    ...(chosen.backend ? { backend: chosen.backend } : {}),
  });
  return { model: opened.model, backend: opened.kernels.backend, close: () => opened.close() };
}

async function runTandem(job: ModelBenchJob): Promise<ModelBenchResult> {
  const { generate } = await import('../src/engine/index.js');
  const opened = await openTandem(job);
  try {
    const { model } = opened;
    const cache = model.newSession({
      contextLength: job.prompt.length + Math.max(job.tokens, job.warmup) + 8,
    });
    let warmupMs: number | undefined;
    if (job.warmup > 0) {
      // untimed: the same prompt, then the cache emptied for the timed run
      const t = performance.now();
      await generate(model, cache, job.prompt, { maxTokens: job.warmup });
      cache.reset();
      warmupMs = performance.now() - t;
    }
    const before = power.meter?.joules();
    const r = await generate(model, cache, job.prompt, { maxTokens: job.tokens });
    return {
      ...energy(before, r.tokens.length),
      engine: 'tandem',
      threads: job.threads,
      prefill_tok_s: r.prefillTokS,
      decode_tok_s: r.decodeTokS,
      ttft_ms: r.ttftMs,
      peak_rss_mb: peakRssMb(),
      backend: opened.backend,
      ...(warmupMs !== undefined ? { warmup_ms: warmupMs } : {}),
    };
  } finally {
    await opened.close();
  }
}

async function runLlamaCpp(job: ModelBenchJob): Promise<ModelBenchResult> {
  const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
  // the anchor runs where tandem runs: on the GPU (Vulkan, every layer) beside --kernels webgpu
  const onGpu = job.kernels === 'webgpu';
  const llama = await getLlama({
    gpu: onGpu ? 'vulkan' : false,
    build: 'never',
    logLevel: LlamaLogLevel.error,
  });
  const model = await llama.loadModel({ modelPath: job.model, gpuLayers: onGpu ? 'max' : 0 });
  const context = await model.createContext({
    contextSize: Math.max(256, job.prompt.length + Math.max(job.tokens, job.warmup) + 8),
    threads: job.threads,
    batchSize: 512,
  });
  const seq = context.getSequence();
  let warmupMs: number | undefined;
  if (job.warmup > 0) {
    // untimed: the same prompt, then the sequence's history cleared (nothing of it is reused)
    const t = performance.now();
    let w = 0;
    for await (const _token of seq.evaluate(job.prompt as never[], { temperature: 0 }))
      if (++w >= job.warmup) break;
    await seq.clearHistory();
    warmupMs = performance.now() - t;
  }
  const before = power.meter?.joules();
  const start = performance.now();
  let ttft = 0;
  let firstAt = 0;
  let n = 0;
  for await (const _token of seq.evaluate(job.prompt as never[], { temperature: 0 })) {
    if (n === 0) {
      firstAt = performance.now();
      ttft = firstAt - start;
    }
    if (++n >= job.tokens) break;
  }
  const decodeMs = performance.now() - firstAt;
  const result: ModelBenchResult = {
    ...energy(before, n),
    engine: 'llama.cpp',
    threads: job.threads,
    prefill_tok_s: job.prompt.length / (ttft / 1000),
    decode_tok_s: n > 1 ? (n - 1) / (decodeMs / 1000) : 0,
    ttft_ms: ttft,
    peak_rss_mb: peakRssMb(),
    ...(onGpu ? { backend: 'vulkan' } : {}),
    ...(warmupMs !== undefined ? { warmup_ms: warmupMs } : {}),
  };
  await context.dispose();
  await model.dispose();
  await llama.dispose();
  return result;
}

/**
 * The machine's joules per generated token over the run (prefill included), from the meter's
 * reading `before` it; or why there is no figure.
 */
function energy(
  before: number | undefined,
  tokens: number,
): Pick<ModelBenchResult, 'j_per_token' | 'power_reason'> {
  if (!power.meter || before === undefined) return { power_reason: power.reason ?? 'no power meter' };
  const j = joulesPerToken(power.meter.joules() - before, tokens);
  return j === undefined ? { power_reason: 'no token was generated' } : { j_per_token: j };
}

const job = JSON.parse(await readStdin()) as ModelBenchJob;
const power: PowerProbe = await openPowerMeter();
try {
  const result = job.engine === 'tandem' ? await runTandem(job) : await runLlamaCpp(job);
  process.stdout.write(JSON.stringify(result) + '\n');
} catch (error) {
  // A typed error goes to stderr as the CLI's --json error line, which the parent rebuilds.
  process.exitCode = report(error, true);
} finally {
  power.meter?.close();
}
