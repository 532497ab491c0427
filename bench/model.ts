// `tandem bench model`: prefill tok/s (a 128-token prompt), decode tok/s, TTFT and peak RSS
// of tandem's engine, with llama.cpp (node-llama-cpp, CPU) on the same file and threads
// beside it. Each engine runs in its own child process.
import { statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { TandemError, errorCodes, type ErrorCode } from '../src/errors/index.js';
import { GgufModelFile, configFromMetadata } from '../src/engine/index.js';
import { JsonChildError, runJsonChild } from '../src/util/json-child.js';
import type { KernelsChoice } from '../src/kernels/webgpu/index.js';
import { formatTable } from './table.js';

export interface ModelBenchJob {
  engine: 'tandem' | 'llama.cpp';
  model: string;
  threads: number;
  prompt: number[];
  tokens: number;
  /** Tokens of an untimed run of the same prompt before the timed one (0: the timed run is the process's first). */
  warmup: number;
  /** tandem's --kernels; with webgpu, llama.cpp runs on the GPU too (its Vulkan build, every layer offloaded). */
  kernels?: KernelsChoice;
}

/** One JSON line of `--json`. */
export interface ModelBenchResult {
  engine: 'tandem' | 'llama.cpp';
  threads: number;
  prefill_tok_s: number;
  decode_tok_s: number;
  ttft_ms: number;
  peak_rss_mb: number;
  /** How long the untimed warm-up run took (with --warmup only). */
  warmup_ms?: number;
  /** The machine's joules per generated token over the run, where its power can be read. */
  j_per_token?: number;
  /** Why there is no j_per_token (not part of the JSON line). */
  power_reason?: string;
  /** tandem's kernels backend (not part of the JSON line). */
  backend?: string;
}

export interface ModelBenchOptions {
  model: string;
  threads: number;
  promptTokens: number;
  tokens: number;
  /** Also run llama.cpp (default true). */
  llamaCpp: boolean;
  timeoutMs: number;
  /** Tokens of an untimed run in each engine's process before the timed one (default 0: timed cold). */
  warmup?: number;
  /** tandem's kernels (default: the CPU default). */
  kernels?: KernelsChoice;
}

const childPath = fileURLToPath(new URL('./model-child.ts', import.meta.url));

/** A fixed pseudo-random prompt of ordinary token ids (ids below 3 are usually special). */
export function benchPrompt(vocab: number, length: number): number[] {
  let a = 12345;
  return Array.from({ length }, () => {
    a = (Math.imul(a, 1103515245) + 12345) >>> 0;
    return 3 + (a % Math.max(1, vocab - 3));
  });
}

/** benchPrompt over the vocabulary of the model at `path`. */
export function benchPromptFor(path: string, length: number): number[] {
  const file = GgufModelFile.open(path);
  try {
    const dims = new Map([...file.tensors].map(([n, t]) => [n, t.dims]));
    return benchPrompt(configFromMetadata((k) => file.meta(k), dims).vocabSize, length);
  } finally {
    file.close();
  }
}

/**
 * The typed error a failed child reported: the last stderr line that is the CLI's `--json`
 * error (`{"error":{"code",...}}`, written by model-child.ts), rebuilt with the same code,
 * message and hint. Undefined when the child died some other way.
 */
export function childError(
  stderr: string,
  engine: ModelBenchJob['engine'],
  cause?: unknown,
): TandemError | undefined {
  for (const line of stderr.trim().split('\n').reverse()) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch {
      continue;
    }
    const e = (parsed as { error?: Record<string, unknown> } | null)?.error;
    if (typeof e !== 'object' || e === null) continue;
    if (typeof e.code !== 'string' || !Object.hasOwn(errorCodes, e.code) || typeof e.message !== 'string')
      continue;
    const details =
      typeof e.details === 'object' && e.details !== null ? (e.details as Record<string, unknown>) : {};
    return new TandemError(e.code as ErrorCode, e.message, {
      hint: typeof e.hint === 'string' ? e.hint : 'see the error above',
      details: { ...details, engine },
      ...(cause === undefined ? {} : { cause }),
    });
  }
  return undefined;
}

async function runChild(job: ModelBenchJob, timeoutMs: number): Promise<ModelBenchResult> {
  try {
    return await runJsonChild<ModelBenchResult>(childPath, job, {
      timeoutMs,
      what: `bench model: the ${job.engine} run`,
    });
  } catch (e) {
    if (e instanceof JsonChildError && e.reason === 'timeout') {
      throw new TandemError('TIMEOUT', `bench model: ${job.engine} did not finish within ${timeoutMs} ms`, {
        hint: 'use a smaller model or fewer --tokens, or raise --timeout',
      });
    }
    const typed =
      e instanceof JsonChildError && e.reason === 'exit' ? childError(e.stderr, job.engine, e) : undefined;
    if (typed) throw typed;
    const detail =
      e instanceof JsonChildError ? e.stderr.trim().split('\n').slice(-3).join(' | ') : String(e);
    throw new TandemError('INTERNAL', `bench model: the ${job.engine} run failed: ${detail}`, {
      hint:
        job.engine === 'llama.cpp'
          ? 'llama.cpp could not run this file; try --no-llama-cpp'
          : 'run `tandem run MODEL --prompt-tokens 1,2,3` to see the error',
      cause: e,
    });
  }
}

/** Runs tandem, then llama.cpp, one after the other (never at once: they would share the cores). */
export async function benchModel(
  o: ModelBenchOptions,
): Promise<{ rows: ModelBenchResult[]; fileMb: number }> {
  const prompt = benchPromptFor(o.model, o.promptTokens);
  const rows: ModelBenchResult[] = [];
  const base = {
    model: o.model,
    threads: o.threads,
    prompt,
    tokens: o.tokens,
    warmup: o.warmup ?? 0,
    ...(o.kernels ? { kernels: o.kernels } : {}),
  };
  rows.push(await runChild({ engine: 'tandem', ...base }, o.timeoutMs));
  if (o.llamaCpp) rows.push(await runChild({ engine: 'llama.cpp', ...base }, o.timeoutMs));
  return { rows, fileMb: statSync(o.model).size / 1048576 };
}

/** The JSON line of a result, in the field order. */
export function jsonLine(r: ModelBenchResult): string {
  const round = (x: number): number => Math.round(x * 100) / 100;
  return JSON.stringify({
    engine: r.engine,
    threads: r.threads,
    prefill_tok_s: round(r.prefill_tok_s),
    decode_tok_s: round(r.decode_tok_s),
    ttft_ms: round(r.ttft_ms),
    peak_rss_mb: round(r.peak_rss_mb),
    ...(r.j_per_token !== undefined ? { j_per_token: round(r.j_per_token) } : {}),
    ...(r.warmup_ms !== undefined ? { warmup_ms: round(r.warmup_ms) } : {}),
  });
}

export function table(rows: readonly ModelBenchResult[], fileMb: number): string {
  const ours = rows.find((r) => r.engine === 'tandem');
  const theirs = rows.find((r) => r.engine === 'llama.cpp');
  const head = [
    'engine',
    'threads',
    'prefill tok/s',
    'decode tok/s',
    'J/token',
    'TTFT ms',
    'peak RSS MB',
    'RSS / file',
  ];
  const body = rows.map((r) => [
    r.engine + (r.backend ? ` (${r.backend})` : ''),
    String(r.threads),
    r.prefill_tok_s.toFixed(1),
    r.decode_tok_s.toFixed(1),
    r.j_per_token === undefined ? '-' : r.j_per_token.toFixed(3),
    r.ttft_ms.toFixed(0),
    r.peak_rss_mb.toFixed(0),
    (r.peak_rss_mb / fileMb).toFixed(2),
  ]);
  if (ours && theirs) {
    body.push([
      'tandem / llama.cpp',
      '',
      (ours.prefill_tok_s / theirs.prefill_tok_s).toFixed(2),
      (ours.decode_tok_s / theirs.decode_tok_s).toFixed(2),
      ours.j_per_token !== undefined && theirs.j_per_token !== undefined
        ? (ours.j_per_token / theirs.j_per_token).toFixed(2)
        : '',
      (ours.ttft_ms / theirs.ttft_ms).toFixed(2),
      (ours.peak_rss_mb / theirs.peak_rss_mb).toFixed(2),
      '',
    ]);
  }
  return formatTable(head, body);
}

/** Once, where no row has J/token: why the machine's power could not be read. */
export function powerNote(rows: readonly ModelBenchResult[]): string | undefined {
  const reason = rows.find((r) => r.j_per_token === undefined)?.power_reason;
  return reason === undefined ? undefined : `J/token not measured: ${reason}`;
}
