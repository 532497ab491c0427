// Where a `bench serve` run's compute goes, in CPU time: the server's scheduler run in this
// process on the model (no HTTP), driven as `bench serve` drives it (C clients, each sending
// --rounds requests of --prompt-tokens prompt tokens and --max-tokens tokens, one after the
// other), every forward of the model timed by kind: a prefill (`forward p=N`), a batched decode
// step (`batch d=N`), a prompt piece with decode rows along (`mixed p=N d=M`).
//   npx tsx bench/serve-cpu.ts [MODEL] [--threads 1] [--concurrency 1,4] [--rounds 2] [--mixed-chunk K]
//     [--prompt-tokens 128] [--max-tokens 64]
// With one thread the process CPU time is the work itself, so a shared machine's other load
// counts less than in wall time (memory traffic still does); the ratio of a level's CPU per
// token to concurrency 1's is the speed-up an idle machine would show at that thread count if
// the time were all compute. Compare builds by running it in each checkout, alternated.
import { parseArgs } from 'node:util';
import { openModel, type SequenceCache } from '../src/engine/index.js';
import { Metrics } from '../src/api/metrics.js';
import { Scheduler, type SlotCache, type SlotModel } from '../src/api/scheduler.js';
import { benchPromptFor } from './model.js';
import { requestPrompts } from './serve.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    threads: { type: 'string', default: '1' },
    concurrency: { type: 'string', default: '1,4' },
    rounds: { type: 'string', default: '2' },
    'prompt-tokens': { type: 'string', default: '128' },
    'max-tokens': { type: 'string', default: '64' },
    'mixed-chunk': { type: 'string' },
  },
});
const path = positionals[0] ?? '/work/models/tinyllama-q8_0.gguf';
const threads = Number(values.threads);
const levels = values.concurrency.split(',').map(Number);
const rounds = Number(values.rounds);
const maxTokens = Number(values['max-tokens']);
const base = benchPromptFor(path, Number(values['prompt-tokens']));
// one prompt per request, each its own from the first token (as bench serve's): no prompt reuse
let sent = 0;
const nextPrompt = (): number[] => requestPrompts(base, 1, sent++)[0]!;

interface Spent {
  calls: number;
  cpuMs: number;
  wallMs: number;
}
const spent = new Map<string, Spent>();
const cpuMs = (): number => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
async function timed<T>(kind: string, run: () => Promise<T>): Promise<T> {
  const c0 = cpuMs();
  const w0 = performance.now();
  const out = await run();
  const s = spent.get(kind) ?? { calls: 0, cpuMs: 0, wallMs: 0 };
  s.calls++;
  s.cpuMs += cpuMs() - c0;
  s.wallMs += performance.now() - w0;
  spent.set(kind, s);
  return out;
}

const opened = await openModel(path, { threads, tokenizer: false });
const model = opened.model;
const caches = (c: readonly SlotCache[]): SequenceCache[] => c as SequenceCache[];
// the model as the server's scheduler sees it, each forward timed by kind
const slotModel: SlotModel = {
  newSession: (o) => model.newSession(o),
  forward: (tokens, cache) =>
    timed(`forward p=${tokens.length}`, () => model.forward(tokens, cache as SequenceCache)),
  forwardBatch: (tokens, c) => timed(`batch d=${tokens.length}`, () => model.forwardBatch(tokens, caches(c))),
  forwardMixed: (prefill, decode) =>
    timed(`mixed p=${prefill.tokens.length} d=${decode.tokens.length}`, () =>
      model.forwardMixed(
        { tokens: prefill.tokens, cache: prefill.cache as SequenceCache },
        { tokens: decode.tokens, caches: caches(decode.caches) },
      ),
    ),
  mixedChunk: model.mixedChunk,
};
const slots = Math.max(...levels);
const scheduler = new Scheduler(slotModel, {
  slots,
  maxQueue: slots,
  contextLength: base.length + maxTokens + 8,
  metrics: new Metrics(slots),
  ...(values['mixed-chunk'] ? { mixedChunk: Number(values['mixed-chunk']) } : {}),
});
const argmax = (l: Float32Array): number => {
  let best = 0;
  for (let i = 1; i < l.length; i++) if ((l[i] as number) > (l[best] as number)) best = i;
  return best;
};
const request = (tokens: number): Promise<unknown> =>
  scheduler.submit({
    prompt: nextPrompt(),
    maxTokens: tokens,
    pick: argmax,
    stopTokens: new Set(),
    onToken: () => true,
    signal: new AbortController().signal,
  });

try {
  await request(2); // warm-up, as bench serve's
  for (const c of levels) {
    spent.clear();
    const c0 = cpuMs();
    const w0 = performance.now();
    await Promise.all(
      Array.from({ length: c }, async () => {
        for (let r = 0; r < rounds; r++) await request(maxTokens);
      }),
    );
    const total = cpuMs() - c0;
    const wall = performance.now() - w0;
    const tokens = c * rounds * maxTokens;
    console.log(
      `concurrency ${c}: ${tokens} tokens, CPU ${total.toFixed(0)} ms, ${(total / tokens).toFixed(2)} ms a token; wall ${wall.toFixed(0)} ms, ${(wall / tokens).toFixed(2)} ms a token (${threads} thread${threads > 1 ? 's' : ''})`,
    );
    for (const [kind, s] of [...spent].sort(([a], [b]) => a.localeCompare(b)))
      console.log(
        `  ${kind.padEnd(18)} ${String(s.calls).padStart(4)} calls  CPU ${s.cpuMs.toFixed(0).padStart(6)} ms  ${(s.cpuMs / s.calls).toFixed(1)} ms a call  wall ${s.wallMs.toFixed(0).padStart(6)} ms  ${(s.wallMs / s.calls).toFixed(1)} ms a call`,
      );
  }
} finally {
  await opened.close();
}
