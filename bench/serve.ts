// `tandem bench serve`: a `tandem serve` process driven over HTTP by C concurrent streaming
// clients per concurrency level (TTFT, inter-token latency, total and per-stream tokens/s),
// with llama.cpp (node-llama-cpp, CPU) beside it on the same file, threads and as many
// sequences in one context (--anchors).
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { streamCompletion } from '../src/api/sse-reader.js';
import { TandemError } from '../src/errors/index.js';
import { tiedToParent } from '../src/util/exit-with-parent.js';
import { runJsonChild } from '../src/util/json-child.js';
import { benchPromptFor } from './model.js';
import { formatTable } from './table.js';

export interface ServeBenchOptions {
  model: string;
  threads: number;
  /** Concurrency levels: that many clients, each with its own stream at a time. */
  concurrency: readonly number[];
  promptTokens: number;
  maxTokens: number;
  /** Requests each client sends, one after the other, per level. */
  rounds: number;
  /**
   * Runs of the level list, alternated (1, 4, 1, 4, ...) on the same server; each level keeps
   * its best run (the highest tok_s_total), so a drift of the machine's speed between levels
   * does not set their ratio. Default 1.
   */
  repeat?: number;
  /** Also run llama.cpp with as many sequences in one context. */
  anchors: boolean;
  timeoutMs: number;
  /** Serve across this many local node processes (`tandem serve --nodes`); `threads` is then per node. */
  nodes?: number;
  /** With `nodes`: how the model is split (tandem serve's --parallel). */
  parallel?: string;
  /** tandem serve's --prefill-chunk (default: the server's). */
  prefillChunk?: number;
  onProgress?: (line: string) => void;
}

/** One JSON line of `--json`, in the field order. */
export interface ServeBenchRow {
  engine: 'tandem' | 'llama.cpp';
  concurrency: number;
  /** tandem across local nodes: how many, and the split. */
  nodes?: number;
  parallel?: string;
  requests: number;
  ttft_ms_p50: number;
  ttft_ms_p99: number;
  itl_ms_p50: number;
  /** The longest gaps: what a stream waits while prompts are prefilled beside it (--prefill-chunk). */
  itl_ms_p99: number;
  /** Completion tokens of all requests over the level's wall time. */
  tok_s_total: number;
  /** Mean over requests of its completion tokens over its time (TTFT included). */
  tok_s_per_stream: number;
}

/** What one request measured: when it started, when each token came, how many it got. */
export interface RequestTiming {
  startMs: number;
  tokenMs: number[];
  endMs: number;
  tokens: number;
}

/** The job the llama.cpp child runs (serve-llama-child.ts). */
export interface LlamaServeJob {
  model: string;
  threads: number;
  /** Client i's round r sends prompts[i * rounds + r] (requestPrompts). */
  prompts: number[][];
  maxTokens: number;
  concurrency: number;
  rounds: number;
}

const llamaChild = fileURLToPath(new URL('./serve-llama-child.ts', import.meta.url));
const tandemBin = fileURLToPath(new URL('../bin/tandem.js', import.meta.url));

function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] as number;
}

/** The row of one level from its requests' timings and its wall time. */
export function summarize(
  engine: ServeBenchRow['engine'],
  concurrency: number,
  timings: readonly RequestTiming[],
  wallMs: number,
): ServeBenchRow {
  const round = (x: number): number => Math.round(x * 100) / 100;
  const gaps = timings.flatMap((t) => t.tokenMs.slice(1).map((ms, i) => ms - (t.tokenMs[i] as number)));
  const tokens = timings.reduce((a, t) => a + t.tokens, 0);
  const perStream = timings.map((t) => t.tokens / ((t.endMs - t.startMs) / 1000));
  return {
    engine,
    concurrency,
    requests: timings.length,
    ttft_ms_p50: round(
      percentile(
        timings.map((t) => (t.tokenMs[0] ?? t.endMs) - t.startMs),
        0.5,
      ),
    ),
    ttft_ms_p99: round(
      percentile(
        timings.map((t) => (t.tokenMs[0] ?? t.endMs) - t.startMs),
        0.99,
      ),
    ),
    itl_ms_p50: round(percentile(gaps, 0.5)),
    itl_ms_p99: round(percentile(gaps, 0.99)),
    tok_s_total: round(tokens / (wallMs / 1000)),
    tok_s_per_stream: round(perStream.reduce((a, b) => a + b, 0) / Math.max(1, perStream.length)),
  };
}

/** Starts `tandem serve` on a free port; resolves with its URL once it says it is listening. */
function startServer(o: ServeBenchOptions, timeoutMs: number): Promise<{ child: ChildProcess; url: string }> {
  const slots = Math.max(...o.concurrency);
  const args = [
    'serve',
    o.model,
    '--port',
    '0',
    '--threads',
    String(o.threads),
    '--slots',
    String(slots),
    '--max-queue',
    String(slots),
    '--context',
    String(o.promptTokens + o.maxTokens + 8),
    ...(o.nodes !== undefined ? ['--nodes', String(o.nodes), '--parallel', o.parallel ?? 'tp'] : []),
    ...(o.prefillChunk !== undefined ? ['--prefill-chunk', String(o.prefillChunk)] : []),
  ];
  const child = spawn(process.execPath, [tandemBin, ...args], tiedToParent('ignore', 'pipe'));
  return new Promise((resolve, reject) => {
    let text = '';
    const fail = (why: string): void => {
      child.kill('SIGKILL');
      reject(
        new TandemError(
          'INTERNAL',
          `bench serve: tandem serve ${why}: ${text.trim().split('\n').slice(-3).join(' | ')}`,
          { hint: 'run `tandem serve MODEL` to see the error' },
        ),
      );
    };
    const timer = setTimeout(() => fail(`did not listen within ${timeoutMs} ms`), timeoutMs);
    child.stderr?.setEncoding('utf8').on('data', (d: string) => {
      text += d;
      const m = /listening on (http:\/\/\S+)/.exec(text);
      if (m) {
        clearTimeout(timer);
        resolve({ child, url: m[1] as string });
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      fail(`exited with ${code}`);
    });
  });
}

/** One streamed completion: the time of each content chunk, and the usage's token count. */
async function streamOnce(url: string, prompt: readonly number[], maxTokens: number): Promise<RequestTiming> {
  const startMs = performance.now();
  const r = await streamCompletion(url, {
    prompt,
    max_tokens: maxTokens,
    temperature: 0,
    stream_options: { include_usage: true },
  });
  if (r.status !== 200 || r.error !== undefined)
    throw new TandemError('INTERNAL', `bench serve: the server answered ${r.status}: ${r.error}`, {
      hint: "see the server's error above",
    });
  return { startMs, tokenMs: r.chunkTimes, endMs: performance.now(), tokens: r.completionTokens ?? 0 };
}

async function benchTandem(o: ServeBenchOptions, base: number[]): Promise<ServeBenchRow[]> {
  const { child, url } = await startServer(o, o.timeoutMs);
  const rows: ServeBenchRow[] = [];
  try {
    // warm-up (the first forward pays one-time costs), on a prompt no request sends
    await streamOnce(url, requestPrompts(base, 1, 1 + Math.max(...o.concurrency) * o.rounds)[0]!, 2);
    const best = new Map<number, ServeBenchRow>();
    for (const c of repeated(o)) {
      const prompts = requestPrompts(base, c * o.rounds);
      const start = performance.now();
      const clients = Array.from({ length: c }, async (_, i) => {
        const timings: RequestTiming[] = [];
        for (let r = 0; r < o.rounds; r++)
          timings.push(await streamOnce(url, prompts[i * o.rounds + r]!, o.maxTokens));
        return timings;
      });
      const timings = (await Promise.all(clients)).flat();
      const row = summarize('tandem', c, timings, performance.now() - start);
      keepBest(best, o.nodes !== undefined ? { ...row, nodes: o.nodes, parallel: o.parallel ?? 'tp' } : row);
      o.onProgress?.(`tandem, concurrency ${c}: ${row.tok_s_total} tok/s total`);
    }
    rows.push(...best.values());
  } finally {
    child.kill('SIGTERM');
  }
  return rows;
}

/** Runs tandem's server at each level, then llama.cpp (never at once: they would share the cores). */
export async function benchServe(o: ServeBenchOptions): Promise<ServeBenchRow[]> {
  const base = benchPromptFor(o.model, o.promptTokens);
  const rows = await benchTandem(o, base);
  if (!o.anchors) return rows;
  const best = new Map<number, ServeBenchRow>();
  for (const c of repeated(o)) {
    const job: LlamaServeJob = {
      model: o.model,
      // as many threads as all of tandem's nodes together
      threads: o.threads * (o.nodes ?? 1),
      prompts: requestPrompts(base, c * o.rounds),
      maxTokens: o.maxTokens,
      concurrency: c,
      rounds: o.rounds,
    };
    const r = await runJsonChild<{ timings: RequestTiming[]; wallMs: number }>(llamaChild, job, {
      timeoutMs: o.timeoutMs,
      what: `bench serve: llama.cpp at concurrency ${c}`,
    });
    const row = summarize('llama.cpp', c, r.timings, r.wallMs);
    keepBest(best, row);
    o.onProgress?.(`llama.cpp, concurrency ${c}: ${row.tok_s_total} tok/s total`);
  }
  return [...rows, ...best.values()];
}

/** The levels in the order they run: the list, `repeat` times. */
function repeated(o: ServeBenchOptions): number[] {
  return Array.from({ length: o.repeat ?? 1 }, () => o.concurrency).flat();
}

/** Keeps a level's run with the highest tok_s_total (the first level order is kept). */
function keepBest(best: Map<number, ServeBenchRow>, row: ServeBenchRow): void {
  const had = best.get(row.concurrency);
  if (!had || row.tok_s_total > had.tok_s_total) best.set(row.concurrency, row);
}

/**
 * The most concurrency C could give over concurrency 1 if a decode step of C rows cost no
 * more than one of a single row, while prefill, bound by arithmetic, costs C times one:
 * C(P + D) / (CP + D), with P the TTFT p50 and D = (maxTokens - 1) x the ITL p50 of
 * concurrency 1 (a request's prefill and decode time alone).
 */
export function prefillBound(one: ServeBenchRow, concurrency: number, maxTokens: number): number {
  const p = one.ttft_ms_p50;
  const d = Math.max(0, maxTokens - 1) * one.itl_ms_p50;
  return (concurrency * (p + d)) / (concurrency * p + d);
}

/** The table of `rows`; with `maxTokens` (the requests' --max-tokens) a prefill-bound column (prefillBound). */
export function table(rows: readonly ServeBenchRow[], maxTokens?: number): string {
  const head = [
    'engine',
    'conc',
    'requests',
    'TTFT p50 ms',
    'TTFT p99 ms',
    'ITL p50 ms',
    'ITL p99 ms',
    'tok/s total',
    'x conc 1',
    'prefill bound',
    'tok/s/stream',
  ];
  // each engine's total against its own concurrency 1 (and the same nodes): what batching gives
  const single = (r: ServeBenchRow): ServeBenchRow | undefined =>
    rows.find((o) => o.engine === r.engine && o.nodes === r.nodes && o.concurrency === 1);
  const body = rows.map((r) => {
    const one = single(r);
    return [
      r.nodes !== undefined ? `${r.engine} (${r.nodes} nodes, ${r.parallel})` : r.engine,
      String(r.concurrency),
      String(r.requests),
      r.ttft_ms_p50.toFixed(1),
      r.ttft_ms_p99.toFixed(1),
      r.itl_ms_p50.toFixed(2),
      r.itl_ms_p99.toFixed(2),
      r.tok_s_total.toFixed(1),
      one ? `${(r.tok_s_total / one.tok_s_total).toFixed(2)}x` : '-',
      one && maxTokens !== undefined && r.concurrency > 1
        ? `${prefillBound(one, r.concurrency, maxTokens).toFixed(2)}x`
        : '-',
      r.tok_s_per_stream.toFixed(1),
    ];
  });
  return formatTable(head, body);
}

/**
 * `count` prompts of base's length, the k-th (from `first`) base with its first token moved k
 * places on: every request's prompt differs from its first token, so no engine can take one
 * from a cache of another (tandem serve's prompt reuse, a llama.cpp sequence's history) and a
 * level measures batching, not caching.
 */
export function requestPrompts(base: readonly number[], count: number, first = 0): number[][] {
  // ids 3..top, top the largest base uses: inside the vocabulary, past the special tokens
  const top = Math.max(...base);
  return Array.from({ length: count }, (_, k) => [
    3 + (((base[0] as number) - 3 + first + k) % Math.max(1, top - 2)),
    ...base.slice(1),
  ]);
}
