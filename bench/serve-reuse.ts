// What the server's prompt reuse saves a conversation: the scheduler (no HTTP) on one slot runs
// a chat-like series of requests, each the previous prompt plus --turn new tokens, and prints
// each request's time to its first token and the prompt tokens it took from the slot, against
// the same prompt on a fresh slot (another slot that last held a prompt of different tokens).
//   npx tsx bench/serve-reuse.ts [MODEL] [--threads 2] [--prompt-tokens 256] [--turn 32] [--turns 4] [--json]
import { parseArgs } from 'node:util';
import { openModel } from '../src/engine/index.js';
import { Metrics } from '../src/api/metrics.js';
import { Scheduler } from '../src/api/scheduler.js';
import { benchPromptFor } from './model.js';
import { requestPrompts } from './serve.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    threads: { type: 'string', default: '2' },
    'prompt-tokens': { type: 'string', default: '256' },
    turn: { type: 'string', default: '32' },
    turns: { type: 'string', default: '4' },
    json: { type: 'boolean', default: false },
  },
});
const path = positionals[0] ?? '/work/models/tinyllama-q8_0.gguf';
const turn = Number(values.turn);
const turns = Number(values.turns);
const base = benchPromptFor(path, Number(values['prompt-tokens']) + turn * turns);
const first = Number(values['prompt-tokens']);

const opened = await openModel(path, { threads: Number(values.threads), tokenizer: false });
const scheduler = new Scheduler(opened.model, {
  slots: 1,
  maxQueue: 1,
  contextLength: base.length + 8,
  metrics: new Metrics(1),
});

/** Time to the first token of a one-token request, and the prompt tokens the slot held. */
async function ttft(prompt: readonly number[]): Promise<{ ms: number; cached: number }> {
  const start = performance.now();
  const end = await scheduler.submit({
    prompt,
    maxTokens: 1,
    pick: () => 0,
    stopTokens: new Set(),
    onToken: () => true,
    signal: new AbortController().signal,
  });
  return { ms: performance.now() - start, cached: end.cachedPromptTokens };
}

try {
  await ttft(requestPrompts(base, 1, 1)[0]!.slice(0, 32)); // warm-up
  for (let k = 0; k <= turns; k++) {
    const prompt = base.slice(0, first + k * turn);
    // a slot that last held another prompt (its first token differs): nothing to reuse
    await ttft(requestPrompts(prompt, 1, 1)[0]!);
    const fresh = await ttft(prompt);
    // the conversation so far held: only what is new is prefilled
    if (k > 0) await ttft(base.slice(0, first + (k - 1) * turn));
    const reused = k > 0 ? await ttft(prompt) : fresh;
    const row = {
      prompt_tokens: prompt.length,
      cached_tokens: reused.cached,
      ttft_fresh_ms: Math.round(fresh.ms),
      ttft_reused_ms: Math.round(reused.ms),
    };
    console.log(
      values.json
        ? JSON.stringify(row)
        : `prompt ${String(row.prompt_tokens).padStart(5)}  cached ${String(row.cached_tokens).padStart(5)}  TTFT fresh ${String(row.ttft_fresh_ms).padStart(6)} ms  reused ${String(row.ttft_reused_ms).padStart(6)} ms`,
    );
  }
} finally {
  await opened.close();
}
