import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ReferenceKernels } from '../../kernels/index.js';
import { flatTree, sumTree, treeSpares } from '../../kernels/reduce-native.js';
import { isTandemError } from '../../errors/index.js';
import type { ShardComm } from './comm.js';
import { Model } from './model.js';
import type { ModelFile } from './model-file.js';
import { referenceLogits } from './reference-forward.js';
import { fullShard, type ShardSpec } from './shard.js';
import { tinyModelFile, type TinyModelOptions } from './tiny-model.js';
import type { GroupSum } from './leaves.js';
import { tensorSplit } from './tp-split.js';

const kernels = new ReferenceKernels();
const prompt = [1, 8, 30, 2];

function maxRelDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let scale = 0;
  let diff = 0;
  for (let i = 0; i < a.length; i++) {
    scale = Math.max(scale, Math.abs(b[i]!));
    diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
  }
  return diff / scale;
}

function argmax(x: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < x.length; i++) if (x[i]! > x[best]!) best = i;
  return best;
}

const cases: [string, TinyModelOptions][] = [
  ['llama GQA', { arch: 'llama' }],
  ['llama 3 rope frequency factors', { arch: 'llama', ropeFreqs: true, ropeFreqBase: 500000 }],
  ['llama tied embeddings, MHA', { arch: 'llama', tied: true, kvHeads: 4 }],
  ['llama MoE (Mixtral)', { arch: 'llama', experts: 4, expertsUsed: 2 }],
  ['qwen2 (biases, NEOX)', { arch: 'qwen2' }],
  ['qwen3 (q/k norms, wide heads)', { arch: 'qwen3', headDim: 16 }],
  ['qwen2moe (shared expert, no renormalisation)', { arch: 'qwen2moe' }],
  ['qwen3moe', { arch: 'qwen3moe', experts: 6, expertsUsed: 3 }],
];

for (const [name, options] of cases) {
  test(`${name}: prefill and decode match a float64 reference forward`, async () => {
    const file = tinyModelFile({ ...options, seed: 7 });
    const model = await Model.load(file, kernels);
    const cache = model.newSession();
    const tokens = [3, 17, 42, 5, 9];
    let logits = await model.forward(tokens, cache);
    for (let step = 0; step < 3; step++) {
      const expected = referenceLogits(file, model.config, tokens);
      assert.ok(
        maxRelDiff(logits, expected) < 1e-5,
        `step ${step}: relative difference ${maxRelDiff(logits, expected)}`,
      );
      const next = argmax(logits);
      tokens.push(next);
      logits = await model.forward([next], cache);
    }
    assert.equal(cache.length, tokens.length);
  });
}

test("an f16 KV cache gives the f32 cache's greedy tokens and close logits", async () => {
  const model = await Model.load(tinyModelFile({ arch: 'qwen3', seed: 9 }), kernels);
  const f32 = model.newSession();
  const f16 = model.newSession({ kvType: 'f16' });
  let a = await model.forward(prompt, f32);
  let b = await model.forward(prompt, f16);
  for (let step = 0; step < 6; step++) {
    assert.ok(maxRelDiff(b, a) < 1e-2, `step ${step}: ${maxRelDiff(b, a)}`);
    assert.equal(argmax(b), argmax(a));
    a = await model.forward([argmax(a)], f32);
    b = await model.forward([argmax(b)], f16);
  }
  assert.ok(maxRelDiff(b, a) > 0, 'the f16 cache really rounds');
});

/**
 * An in-process group: each rank's call resolves once all ranks contributed; sums every rank's
 * pieces in the group sum's tree (or one part per rank in the flat tree), as the real exchange.
 */
function localGroup(size: number): ShardComm[] {
  let pending: { x: Float32Array; resolve: () => void }[] = [];
  let gathered: { local: Float32Array; full: Float32Array; resolve: () => void }[] = [];
  return Array.from({ length: size }, (_, rank) => ({
    allReduceSum(x: Float32Array, group?: GroupSum): Promise<void> {
      return new Promise((resolve) => {
        pending[rank] = { x, resolve };
        if (pending.filter(Boolean).length < size) return;
        const counts = group?.counts ?? new Array<number>(size).fill(1);
        const m = pending[0]!.x.length / counts[0]!;
        const parts = pending.flatMap((p, r) =>
          Array.from({ length: counts[r]! }, (_, q) => p.x.slice(q * m, (q + 1) * m)),
        );
        const tree = group?.tree ?? flatTree(size);
        const sum = new Float32Array(m);
        sumTree(
          tree,
          parts,
          sum,
          Array.from({ length: treeSpares(tree) }, () => new Float32Array(m)),
        );
        const done = pending;
        pending = [];
        for (const p of done) {
          p.x.set(sum);
          p.resolve();
        }
      });
    },
    allGatherLogits(local: Float32Array, full: Float32Array): Promise<void> {
      return new Promise((resolve) => {
        gathered[rank] = { local, full, resolve };
        if (gathered.filter(Boolean).length < size) return;
        const done = gathered;
        gathered = [];
        for (const g of done) {
          let o = 0;
          for (const part of done) {
            g.full.set(part.local, o);
            o += part.local.length;
          }
          g.resolve();
        }
      });
    },
  }));
}

function split(total: number, parts: number, i: number): { start: number; end: number } {
  return { start: Math.floor((total * i) / parts), end: Math.floor((total * (i + 1)) / parts) };
}

/** Greedy steps on the shards of a group; returns the tokens and each step's logits (every rank's, checked alike). */
async function runShardedLogits(
  options: TinyModelOptions,
  shards: (full: ShardSpec, whole: Model, file: ModelFile) => ShardSpec[],
  tokens: number[],
): Promise<{ tokens: number[]; logits: Float32Array[] }> {
  const file = tinyModelFile({ ...options, seed: 11 });
  const whole = await Model.load(file, kernels);
  const specs = shards(whole.shard, whole, file);
  const comms = localGroup(specs.length);
  const models = await Promise.all(
    specs.map((shard, r) => Model.load(file, kernels, { shard, comm: comms[r]!, group: specs })),
  );
  const caches = models.map((m) => m.newSession());
  const out = [...tokens];
  const steps: Float32Array[] = [];
  let input = tokens;
  for (let step = 0; step < 6; step++) {
    const logits = await Promise.all(models.map((m, r) => m.forward(input, caches[r]!)));
    for (const l of logits) assert.deepEqual(l, logits[0], 'every rank ends with the same logits');
    steps.push(logits[0]!.slice());
    const next = argmax(logits[0]!);
    out.push(next);
    input = [next];
  }
  return { tokens: out, logits: steps };
}

async function runSharded(
  options: TinyModelOptions,
  shards: (full: ShardSpec) => ShardSpec[],
  tokens: number[],
): Promise<number[]> {
  return (await runShardedLogits(options, shards, tokens)).tokens;
}

async function runSingle(options: TinyModelOptions, tokens: number[]): Promise<number[]> {
  return runSharded(options, (full) => [full], tokens);
}

test('tensor parallel (heads, FFN, vocab split) gives the single-node tokens, on 2 and 3 shards', async () => {
  const options: TinyModelOptions = { arch: 'qwen2', heads: 6, kvHeads: 2, width: 48, ff: 64 };
  const single = await runSingle(options, prompt);
  for (const parts of [2, 3]) {
    const tp = await runSharded(
      options,
      (full) =>
        Array.from({ length: parts }, (_, r) => ({
          ...full,
          heads: split(6, parts, r),
          ffn: split(64, parts, r),
          vocab: split(64, parts, r),
        })),
      prompt,
    );
    assert.deepEqual(tp, single, `${parts} shards`);
  }
});

test("tensor parallel on 2, 3 and 4 shards gives one node's logits bit for bit (row-parallel sums in the leaf tree)", async () => {
  // 8 heads, FFN 128, cut where the planner cuts: leaves at the cuts of 2, 4 and 3 ranks
  const options: TinyModelOptions = { arch: 'llama', heads: 8, kvHeads: 4, width: 64, ff: 128 };
  const tp = (parts: number) => (full: ShardSpec, whole: Model, file: ModelFile) =>
    Array.from({ length: parts }, (_, r) => ({
      ...full,
      ...tensorSplit(whole.config, file.tensors, parts, r, false),
    }));
  const single = await runShardedLogits(options, (full) => [full], prompt);
  for (const parts of [2, 3, 4]) {
    const got = await runShardedLogits(options, tp(parts), prompt);
    assert.deepEqual(got.tokens, single.tokens, `${parts} shards`);
    for (const [step, logits] of got.logits.entries())
      assert.deepEqual(logits, single.logits[step], `${parts} shards, step ${step}: logits bit for bit`);
  }
});

test("tensor parallel over MoE models on 2, 3 and 4 shards gives one node's logits bit for bit (each expert's output summed in its leaf tree)", async () => {
  for (const options of [
    { arch: 'llama', experts: 4, expertsUsed: 2, heads: 8, kvHeads: 4, width: 64, ff: 96 },
    { arch: 'qwen2moe', experts: 4, expertsUsed: 2, heads: 8, kvHeads: 4, width: 64, ff: 96, sharedFf: 128 },
  ] as TinyModelOptions[]) {
    const tp = (parts: number) => (full: ShardSpec, whole: Model, file: ModelFile) =>
      Array.from({ length: parts }, (_, r) => ({
        ...full,
        ...tensorSplit(whole.config, file.tensors, parts, r, false),
      }));
    const single = await runShardedLogits(options, (full) => [full], prompt);
    for (const parts of [2, 3, 4]) {
      const got = await runShardedLogits(options, tp(parts), prompt);
      for (const [step, logits] of got.logits.entries())
        assert.deepEqual(
          logits,
          single.logits[step],
          `${options.arch} on ${parts} shards, step ${step}: logits bit for bit`,
        );
    }
  }
});

test('expert parallel and shared-expert split give the single-node tokens', async () => {
  const options: TinyModelOptions = { arch: 'qwen2moe', experts: 4, expertsUsed: 2 };
  const single = await runSingle(options, prompt);
  const ep = await runSharded(
    options,
    (full) => [
      {
        ...full,
        heads: { start: 0, end: 2 },
        experts: [0, 3],
        sharedFfn: { start: 0, end: 20 },
        vocab: split(64, 2, 0),
      },
      {
        ...full,
        heads: { start: 2, end: 4 },
        experts: [1, 2],
        sharedFfn: { start: 20, end: 40 },
        vocab: split(64, 2, 1),
      },
    ],
    prompt,
  );
  assert.deepEqual(ep, single);
});

test('pipeline stages compose: embed, layers on each stage, head on the last', async () => {
  const file = tinyModelFile({ arch: 'llama', layers: 3, seed: 5 });
  const whole = await Model.load(file, kernels);
  const full = whole.shard;
  const first = await Model.load(file, kernels, {
    shard: { ...full, layers: { start: 0, end: 2 }, head: false },
  });
  const last = await Model.load(file, kernels, {
    shard: { ...full, layers: { start: 2, end: 3 }, embed: false },
  });
  const c1 = first.newSession();
  const c2 = last.newSession();
  const x = first.embed(prompt);
  await first.forwardLayers(x, prompt.length, 0, c1);
  await last.forwardLayers(x, prompt.length, 0, c2);
  const width = whole.config.embeddingLength;
  const staged = await last.logits(x.subarray((prompt.length - 1) * width));
  const direct = await whole.forward(prompt, whole.newSession());
  assert.deepEqual(staged, direct);
});

test('the context limit is a typed error before anything is computed', async () => {
  const model = await Model.load(tinyModelFile({ arch: 'llama', context: 8 }), kernels);
  const cache = model.newSession();
  await model.forward([1, 2, 3, 4, 5, 6], cache);
  await assert.rejects(
    model.forward([1, 2, 3], cache),
    (e) => isTandemError(e, 'KV_CONTEXT_FULL') && e.message.includes('8'),
  );
  assert.equal(cache.length, 6);
  await assert.rejects(model.forward([999], cache), (e) => isTandemError(e, 'GENERATE_PROMPT'));
  const shard: ShardSpec = { ...fullShard(model.config), experts: [0] };
  await assert.rejects(Model.load(tinyModelFile({ arch: 'llama' }), kernels, { shard }), (e) =>
    isTandemError(e, 'MODEL_SHARD'),
  );
});
