import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createLocalWorld } from '../collectives/local-world.js';
import { isTandemError } from '../errors/index.js';
import { ReferenceKernels } from '../kernels/index.js';
import { generate } from '../engine/generate/generate.js';
import { Model } from '../engine/model/model.js';
import type { ModelFile } from '../engine/model/model-file.js';
import { tinyModelFile, type TinyModelOptions } from '../engine/model/tiny-model.js';
import { buildPlan, type ParallelKind, type ParallelPlan } from './plan.js';
import { loadRank } from './rank.js';
import { generateOnRank, type RankResult } from './runner.js';
import type { WireFormat } from './wire.js';

const kernels = new ReferenceKernels();
const prompt = [1, 8, 30, 2, 17, 5, 9, 11, 40, 3];
const steps = 8;

async function single(file: ModelFile): Promise<number[]> {
  const model = await Model.load(file, kernels);
  return (await generate(model, model.newSession(), prompt, { maxTokens: steps })).tokens;
}

async function distributed(
  file: ModelFile,
  plan: ParallelPlan,
  wire: WireFormat = 'f32',
  logits: 'full' | 'argmax' = 'full',
  direct = false,
): Promise<RankResult[]> {
  const world = await createLocalWorld(plan.nodes, { timeoutMs: 10_000 });
  const exchange = direct
    ? { provider: 'loopback' as const, host: '127.0.0.1', secret: 's', timeoutMs: 10_000 }
    : undefined;
  const ranks = await Promise.all(
    world.map((w) =>
      loadRank({ file, kernels, plan, world: w, wire, logits, ...(exchange ? { exchange } : {}) }),
    ),
  );
  try {
    if (direct)
      assert.ok(
        ranks.every((r) => (r.exchange !== undefined) === r.group.size > 1),
        'tensor-parallel groups use the direct exchange',
      );
    return await Promise.all(ranks.map((ctx) => generateOnRank(ctx, prompt, { maxTokens: steps })));
  } finally {
    await Promise.all(ranks.map((r) => r.exchange?.close()));
    await Promise.all(world.map((w) => w.close()));
  }
}

const models: [string, TinyModelOptions][] = [
  ['llama', { arch: 'llama', heads: 4, kvHeads: 2, width: 32, ff: 48, layers: 3, vocab: 96, seed: 3 }],
  ['qwen2', { arch: 'qwen2', heads: 6, kvHeads: 2, width: 48, ff: 64, layers: 3, vocab: 96, seed: 4 }],
  ['MoE (Mixtral)', { arch: 'llama', experts: 4, expertsUsed: 2, layers: 3, vocab: 96, seed: 5 }],
  [
    'MoE (Qwen2-MoE, shared expert)',
    { arch: 'qwen2moe', experts: 4, expertsUsed: 2, layers: 3, vocab: 96, seed: 6 },
  ],
];

// The fourth field: tensor-parallel groups exchange partial sums over the fabric directly (TpExchange).
const layouts: [ParallelKind, number, (number | undefined)?, boolean?][] = [
  ['tp', 2],
  ['tp', 2, undefined, true],
  ['tp', 3, undefined, true],
  ['pp', 2],
  ['pp', 3],
  ['hybrid', 4, 2],
  ['hybrid', 4, 2, true],
];

for (const [name, options] of models) {
  test(`${name}: every split gives the single-node tokens on every rank`, async () => {
    const file = tinyModelFile(options);
    const expected = await single(file);
    const model = await Model.load(file, kernels);
    const kinds: [ParallelKind, number, (number | undefined)?, boolean?][] =
      model.config.expertCount > 0
        ? [...layouts, ['ep', 2], ['ep', 3, undefined, true], ['ep', 4, undefined, true]]
        : layouts;
    for (const [kind, nodes, tpSize, direct] of kinds) {
      const plan = buildPlan(model.config, file.tensors, { kind, nodes, ...(tpSize ? { tpSize } : {}) });
      const results = await distributed(file, plan, 'f32', 'full', direct);
      for (const r of results)
        assert.deepEqual(
          r.tokens,
          expected,
          `${kind} on ${nodes} nodes${direct ? ' (direct)' : ''}, rank ${r.metrics.rank}`,
        );
      if (nodes > 1)
        assert.ok(
          results.some((r) => r.metrics.wireBytesPerToken > 0),
          `${kind}: some rank sends bytes during decode`,
        );
    }
  });
}

test('argmax logits exchange and f16/q8 wires still decode greedily on every rank alike', async () => {
  const file = tinyModelFile(models[0]![1]);
  const expected = await single(file);
  const model = await Model.load(file, kernels);
  const tp = buildPlan(model.config, file.tensors, { kind: 'tp', nodes: 2 });
  const argmax = await distributed(file, tp, 'f32', 'argmax');
  for (const r of argmax) assert.deepEqual(r.tokens, expected);
  for (const r of await distributed(file, tp, 'f32', 'argmax', true)) assert.deepEqual(r.tokens, expected);
  const full = await distributed(file, tp, 'f32', 'full');
  assert.ok(
    argmax[0]!.metrics.wireBytesPerToken < full[0]!.metrics.wireBytesPerToken,
    'argmax sends fewer bytes than full logits',
  );
  for (const wire of ['f16', 'q8'] as const) {
    for (const kind of ['tp', 'pp'] as const) {
      const plan = buildPlan(model.config, file.tensors, { kind, nodes: 2 });
      const results = await distributed(file, plan, wire, 'full', kind === 'tp');
      assert.equal(results[0]!.tokens.length, steps);
      for (const r of results) assert.deepEqual(r.tokens, results[0]!.tokens, `${wire} ${kind}: ranks agree`);
    }
    // Expert parallel: tokens travel to their experts as f32 whatever the wire; the combine rounds.
    const moe = tinyModelFile(models[2]![1]);
    const moeConfig = (await Model.load(moe, kernels)).config;
    const ep = buildPlan(moeConfig, moe.tensors, { kind: 'ep', nodes: 3 });
    const epResults = await distributed(moe, ep, wire, 'full', true);
    assert.equal(epResults[0]!.tokens.length, steps);
    for (const r of epResults) assert.deepEqual(r.tokens, epResults[0]!.tokens, `${wire} ep: ranks agree`);
    // The communicator path (tcp nodes) rounds and sums exactly as the direct exchange (shm nodes).
    const tp = buildPlan(model.config, file.tensors, { kind: 'tp', nodes: 3 });
    const prompt2 = { prompt: [5, 6, 7], maxTokens: 12 };
    const viaExchange = await distributedWith(file, tp, wire, true, prompt2);
    const viaComm = await distributedWith(file, tp, wire, false, prompt2);
    assert.deepEqual(viaComm.logits, viaExchange.logits, `${wire}: same logits both ways`);
  }
});

/** Greedy run on every rank recording rank 0's logits at every step. */
async function distributedWith(
  file: ModelFile,
  plan: ParallelPlan,
  wire: WireFormat,
  direct: boolean,
  o: { prompt: number[]; maxTokens: number },
): Promise<{ logits: number[][] }> {
  const world = await createLocalWorld(plan.nodes, { timeoutMs: 10_000 });
  const exchange = direct
    ? { provider: 'loopback' as const, host: '127.0.0.1', secret: 's', timeoutMs: 10_000 }
    : undefined;
  const ranks = await Promise.all(
    world.map((w) => loadRank({ file, kernels, plan, world: w, wire, ...(exchange ? { exchange } : {}) })),
  );
  const logits: number[][] = [];
  try {
    await Promise.all(
      ranks.map((ctx, r) =>
        generateOnRank(ctx, o.prompt, {
          maxTokens: o.maxTokens,
          pick: (l) => {
            if (r === 0) logits.push([...l]);
            let best = 0;
            for (let i = 1; i < l.length; i++) if ((l[i] as number) > (l[best] as number)) best = i;
            return best;
          },
        }),
      ),
    );
    return { logits };
  } finally {
    await Promise.all(ranks.map((r) => r.exchange?.close()));
    await Promise.all(world.map((w) => w.close()));
  }
}

test('plans split heads by KV group, FFN by quantisation blocks, experts whole, layers by stage', () => {
  const file = tinyModelFile({ arch: 'llama', experts: 4, expertsUsed: 2, layers: 5, heads: 4, kvHeads: 2 });
  return Model.load(file, kernels).then((model) => {
    const tp = buildPlan(model.config, file.tensors, { kind: 'tp', nodes: 2 });
    assert.deepEqual(
      tp.ranks.map((r) => r.shard.heads),
      [
        { start: 0, end: 2 },
        { start: 2, end: 4 },
      ],
    );
    const ep = buildPlan(model.config, file.tensors, { kind: 'ep', nodes: 2 });
    assert.deepEqual(
      ep.ranks.map((r) => r.shard.experts),
      [
        [0, 1],
        [2, 3],
      ],
    );
    const pp = buildPlan(model.config, file.tensors, { kind: 'pp', nodes: 2, stageLayers: [2, 3] });
    assert.deepEqual(
      pp.ranks.map((r) => [r.shard.layers, r.shard.embed, r.shard.head]),
      [
        [{ start: 0, end: 2 }, true, false],
        [{ start: 2, end: 5 }, false, true],
      ],
    );
    assert.throws(
      () => buildPlan(model.config, file.tensors, { kind: 'pp', nodes: 6 }),
      (e) => isTandemError(e, 'PAR_BAD_PLAN'),
    );
    assert.throws(
      () => buildPlan(model.config, file.tensors, { kind: 'ep', nodes: 8 }),
      (e) => isTandemError(e, 'PAR_BAD_PLAN'),
    );
  });
});
