import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  generate,
  greedy,
  greedyPick,
  MIXED_PREFILL_CHUNK,
  type LogitsNeed,
  type RowResult,
  openModel,
  type OpenedModel,
  type SequenceCache,
} from '../engine/index.js';
import { makeModel } from '../engine/format/make-model.js';
import { wideModelShape } from '../engine/model/wide-model.js';
import { Metrics } from './metrics.js';
import { Scheduler, type SchedulerOptions, type SlotModel } from './scheduler.js';

/*
 * The scheduler on a one-layer Q8_0 model of TinyLlama's width (where the native kernels'
 * multi-token paths show any difference in the order of a row's sums): greedy sequences that
 * run side by side, joining at step boundaries and prefilled in chunks, give the tokens of the
 * same prompt run alone through `generate` (a lone forward per token, the prompt in one call).
 */

let dir = '';
let opened: OpenedModel;
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tandem-scheduler-'));
  const path = join(dir, 'wide-q8_0.gguf');
  await makeModel(path, { arch: 'llama', shape: wideModelShape, type: 'q8_0', seed: 12 });
  opened = await openModel(path, { threads: 2, tokenizer: false });
});
after(async () => {
  await opened?.close();
  rmSync(dir, { recursive: true, force: true });
});

const vocab = wideModelShape.vocab;
const promptOf = (i: number, length: number): number[] =>
  Array.from({ length }, (_, j) => (i * 131 + j * 29 + 7) % vocab);

/** A greedy run's tokens and each step's logits (the bits tokens alone would hide). */
interface Run {
  tokens: number[];
  logits: Float32Array[];
}

async function alone(prompt: readonly number[], maxTokens: number): Promise<Run> {
  const cache = opened.model.newSession({ contextLength: 128 });
  const logits: Float32Array[] = [];
  const { tokens } = await generate(opened.model, cache, prompt, {
    maxTokens,
    onLogits: (l) => logits.push(l.slice()),
  });
  return { tokens, logits };
}

function scheduler(model: SlotModel, options: Partial<SchedulerOptions> = {}): Scheduler {
  return new Scheduler(model, {
    slots: 8,
    maxQueue: 8,
    contextLength: 128,
    metrics: new Metrics(8),
    ...options,
  });
}

/** Submits a greedy sequence; its tokens and logits, and `onToken` called with each token. */
function run(
  s: Scheduler,
  prompt: readonly number[],
  maxTokens: number,
  onToken: (token: number) => void = () => {},
): Promise<Run> {
  const tokens: number[] = [];
  const logits: Float32Array[] = [];
  return s
    .submit({
      prompt,
      maxTokens,
      pick: greedy,
      stopTokens: new Set(),
      onToken: (token, l) => {
        tokens.push(token);
        logits.push((l as Float32Array).slice());
        onToken(token);
        return true;
      },
      signal: new AbortController().signal,
    })
    .then(() => ({ tokens, logits }));
}

test('8 concurrent greedy sequences each equal the same prompt run alone, logits bit for bit (Q8_0, width 2048)', async () => {
  // prompt lengths below, at and above GEMM_TOKENS, and past one prefill chunk
  const prompts = [1, 5, 11, 12, 13, 30, 47, 64].map((length, i) => promptOf(i, length));
  const want = [];
  for (const p of prompts) want.push(await alone(p, 12));
  const s = scheduler(opened.model, { prefillChunk: 24 });
  const got = await Promise.all(prompts.map((p) => run(s, p, 12)));
  for (const [i, r] of got.entries()) {
    assert.deepEqual(r.tokens, want[i]!.tokens, `sequence ${i}`);
    for (const [step, l] of r.logits.entries())
      assert.ok(
        Buffer.from(l.buffer).equals(Buffer.from(want[i]!.logits[step]!.buffer)),
        `sequence ${i} step ${step}`,
      );
  }
});

for (const mixed of [false, true]) {
  test(`a long prompt is prefilled in chunks between decode steps: the running stream's tokens keep arriving (${mixed ? 'forwardMixed' : 'forward, then forwardBatch'})`, async () => {
    // the model as the scheduler sees it, logging each forward in order
    const events: string[] = [];
    const model = opened.model;
    const logged: SlotModel = {
      newSession: (o) => model.newSession(o),
      forward: (tokens: ArrayLike<number>, cache) => {
        events.push(`forward ${tokens.length}`);
        return model.forward(tokens, cache as SequenceCache);
      },
      forwardBatch: (tokens, caches) => model.forwardBatch(tokens, caches as readonly SequenceCache[]),
      ...(mixed
        ? {
            forwardMixed: (prefill, decode) => {
              events.push(
                `forward ${prefill.tokens.length}${decode.tokens.length > 0 ? ` + ${decode.tokens.length}` : ''}`,
              );
              return model.forwardMixed(
                { tokens: prefill.tokens, cache: prefill.cache as SequenceCache },
                { tokens: decode.tokens, caches: decode.caches as readonly SequenceCache[] },
              );
            },
          }
        : {}),
    };
    const short = promptOf(1, 4);
    const long = promptOf(2, 100);
    const want = [await alone(short, 24), await alone(long, 4)];
    const s = scheduler(logged, { prefillChunk: 24, mixedChunk: 24 });
    let started: (() => void) | undefined;
    const decoding = new Promise<void>((resolve) => (started = resolve));
    const first = run(s, short, 24, (token) => {
      events.push(`A ${token}`);
      if (events.filter((e) => e.startsWith('A ')).length === 3) started?.();
    });
    // the long request arrives while the first stream decodes
    await decoding;
    const second = run(s, long, 4, (token) => events.push(`B ${token}`));
    const got = await Promise.all([first, second]);
    assert.deepEqual(
      got.map((r) => r.tokens),
      want.map((r) => r.tokens),
    );
    // the long prompt's pieces: 24, 24, 24, 28 (the last takes what would leave under
    // GEMM_TOKENS), each with the first stream's decode step along when forwardMixed runs them
    const pieces = events
      .map((e, i) => [e, i] as const)
      .filter(([e]) => e.startsWith('forward ') && e !== 'forward 4');
    const along = mixed ? ' + 1' : '';
    assert.deepEqual(
      pieces.map(([e]) => e),
      [`forward 24${along}`, `forward 24${along}`, `forward 24${along}`, `forward 28${along}`],
    );
    // between the first and the last piece, the first stream's tokens arrived (one per round)
    const from = pieces[0]![1];
    const to = pieces.at(-1)![1];
    const between = events.slice(from, to).filter((e) => e.startsWith('A ')).length;
    assert.equal(between, 3, events.join(', '));
    const bFirst = events.findIndex((e) => e.startsWith('B '));
    assert.ok(bFirst > to, 'the long request emits its first token after its last piece');
  });
}

test('each row is asked for what its sequence uses: nothing before the last prompt piece, a token id for an argmaxOnly sequence', async () => {
  // the model as a cluster answers: a token id for an 'argmax' row, nothing for a 'none' row
  const model = opened.model;
  const asked = new Map<unknown, LogitsNeed[]>();
  const answer = (cache: unknown, row: Float32Array, need: LogitsNeed = 'logits'): RowResult => {
    asked.set(cache, [...(asked.get(cache) ?? []), need]);
    return need === 'argmax' ? greedyPick(row) : need === 'none' ? undefined : row;
  };
  const cluster: SlotModel = {
    newSession: (o) => model.newSession(o),
    forward: async (tokens, cache, need) =>
      answer(cache, await model.forward(tokens, cache as SequenceCache), need),
    forwardBatch: async (tokens, caches, needs) =>
      (await model.forwardBatch(tokens, caches as readonly SequenceCache[])).map((row, t) =>
        answer(caches[t], row, needs?.[t]),
      ),
  };
  const prompts = [promptOf(3, 40), promptOf(4, 40)];
  const want = [await alone(prompts[0]!, 6), await alone(prompts[1]!, 6)];
  const s = scheduler(cluster, { prefillChunk: 16 });
  const tokens: number[] = [];
  const plain = run(s, prompts[1]!, 6);
  await s.submit({
    prompt: prompts[0]!,
    maxTokens: 6,
    pick: greedy,
    argmaxOnly: true,
    stopTokens: new Set(),
    onToken: (token, logits) => {
      assert.equal(logits, undefined, 'an argmaxOnly row came as its token id');
      tokens.push(token);
      return true;
    },
    signal: new AbortController().signal,
  });
  assert.deepEqual(tokens, want[0]!.tokens);
  assert.deepEqual((await plain).tokens, want[1]!.tokens);
  // 40 prompt tokens in pieces of 16, 24 (prefillPiece); 6 tokens: the last piece's row and 5 decode rows
  const needs = [...asked.values()];
  assert.deepEqual(needs.map((n) => n.length).sort(), [7, 7]);
  const kinds = needs.map((n) => n.join(' ')).sort();
  assert.deepEqual(kinds, [
    'none argmax argmax argmax argmax argmax argmax',
    'none logits logits logits logits logits logits',
  ]);
});

test("without a mixedChunk option the pieces beside running streams are the model's mixedChunk", async () => {
  const model = opened.model;
  const pieces: number[] = [];
  const sized: SlotModel = {
    newSession: (o) => model.newSession(o),
    forward: (tokens: ArrayLike<number>, cache) => model.forward(tokens, cache as SequenceCache),
    forwardBatch: (tokens, caches) => model.forwardBatch(tokens, caches as readonly SequenceCache[]),
    forwardMixed: (prefill, decode) => {
      if (decode.tokens.length > 0) pieces.push(prefill.tokens.length);
      return model.forwardMixed(
        { tokens: prefill.tokens, cache: prefill.cache as SequenceCache },
        { tokens: decode.tokens, caches: decode.caches as readonly SequenceCache[] },
      );
    },
    mixedChunk: 20,
  };
  const short = promptOf(3, 4);
  const long = promptOf(4, 70);
  const want = await alone(long, 2);
  const s = scheduler(sized, { prefillChunk: 24 });
  let started: (() => void) | undefined;
  const decoding = new Promise<void>((resolve) => (started = resolve));
  const first = run(s, short, 40, () => started?.());
  await decoding;
  const got = await run(s, long, 2);
  await first;
  assert.deepEqual(got.tokens, want.tokens);
  // 70 tokens in pieces of 20 beside the first stream: 20, 20, 30 (the last takes what would
  // leave under GEMM_TOKENS); the first stream has 40 tokens to go, so it decodes beside all
  assert.deepEqual(pieces, [20, 20, 30]);
  // the model's own chunk: two of its kernels' GEMM lane groups where they have groups
  const group = opened.kernels.gemmGroup;
  assert.equal(model.mixedChunk, group === undefined ? MIXED_PREFILL_CHUNK : 2 * group);
});

/** Submits a greedy sequence alone; its logits and how many prompt tokens the slot held. */
async function runCounted(
  s: Scheduler,
  prompt: readonly number[],
  maxTokens: number,
  stepHook?: () => void,
): Promise<{ logits: Float32Array[]; cached: number }> {
  const logits: Float32Array[] = [];
  const end = await s.submit({
    prompt,
    maxTokens,
    pick: greedy,
    stopTokens: new Set(),
    onToken: (_, l) => {
      logits.push((l as Float32Array).slice());
      stepHook?.();
      return true;
    },
    signal: new AbortController().signal,
  });
  return { logits, cached: end.cachedPromptTokens };
}

const sameBits = (a: readonly Float32Array[], b: readonly Float32Array[]): boolean =>
  a.length === b.length && a.every((l, i) => Buffer.from(l.buffer).equals(Buffer.from(b[i]!.buffer)));

test('a slot keeps its prompt: the next prompt that starts the same is prefilled from where they part, logits bit for bit those of the prompt alone', async () => {
  const metrics = new Metrics(1);
  const s = scheduler(opened.model, { slots: 1, maxQueue: 4, metrics, prefillChunk: 24 });
  const base = promptOf(3, 40);
  const other = [...base.slice(0, 20), ...promptOf(5, 25)];
  // [prompt, tokens the slot holds of it]: all the last prompt shares with it, but the last
  // GEMM_TOKENS (12) of a prompt are prefilled again; a prompt under 12 tokens is not kept
  const cases: [number[], number][] = [
    [base, 0],
    [[...base, ...promptOf(4, 10)], 38],
    [other, 20],
    [other, 33],
    [promptOf(6, 8), 0],
    [other, 0],
  ];
  let prefilled = 0;
  let cached = 0;
  for (const [i, [prompt, want]] of cases.entries()) {
    const got = await runCounted(s, prompt, 4);
    assert.equal(got.cached, want, `case ${i}: cached prompt tokens`);
    assert.ok(sameBits(got.logits, (await alone(prompt, 4)).logits), `case ${i}: logits as the prompt alone`);
    prefilled += prompt.length - want;
    cached += want;
  }
  assert.equal(metrics.promptTokensCached, cached);
  assert.equal(metrics.promptTokens, prefilled);
});

test('a sequence that fails leaves nothing of its prompt to reuse', async () => {
  const s = scheduler(opened.model, { slots: 1, maxQueue: 4 });
  const prompt = promptOf(7, 30);
  await assert.rejects(
    runCounted(s, prompt, 4, () => {
      throw new Error('the client went away');
    }),
    /client went away/,
  );
  assert.equal((await runCounted(s, prompt, 2)).cached, 0);
  assert.equal((await runCounted(s, prompt, 2)).cached, 18);
});

test('a new sequence takes the free slot that holds the longest start of its prompt', async () => {
  const s = scheduler(opened.model, { slots: 3, maxQueue: 4 });
  const a = promptOf(8, 30);
  const b = promptOf(9, 30);
  await Promise.all([runCounted(s, a, 2), runCounted(s, b, 2)]);
  const next = await runCounted(s, [...b, ...promptOf(10, 14)], 2);
  assert.equal(next.cached, 30);
});

test('a sequence with nothing to reuse takes an empty slot, else the one used longest ago: the prompts kept for others go last', async () => {
  const s = scheduler(opened.model, { slots: 2, maxQueue: 4 });
  const [a, b, c] = [promptOf(11, 30), promptOf(12, 30), promptOf(13, 30)];
  await runCounted(s, a, 2);
  // b takes the empty slot, so a's prompt stays
  await runCounted(s, b, 2);
  assert.equal((await runCounted(s, [...a, ...promptOf(14, 14)], 2)).cached, 30);
  // both slots hold a prompt now: c takes b's (used longer ago than a's longer version)
  await runCounted(s, c, 2);
  assert.equal((await runCounted(s, [...a, ...promptOf(14, 14), ...promptOf(15, 14)], 2)).cached, 44);
  assert.equal((await runCounted(s, [...b, ...promptOf(16, 14)], 2)).cached, 0, "b's prompt was given up");
});
