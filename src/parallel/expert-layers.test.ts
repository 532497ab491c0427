import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createLocalWorld } from '../collectives/local-world.js';
import { isTandemError } from '../errors/index.js';
import { ReferenceKernels } from '../kernels/index.js';
import { generate } from '../engine/generate/generate.js';
import { configFromMetadata, type ModelConfig } from '../engine/model/config.js';
import { Model } from '../engine/model/model.js';
import { zipfChoiceShares } from '../engine/format/router-skew.js';
import { tinyModelFile } from '../engine/model/tiny-model.js';
import {
  balanceExperts,
  balanceLayers,
  layerExpertSets,
  layersMaxNodeShare,
  placementOf,
} from './expert-balance.js';
import { shardBytes } from './memory.js';
import { buildPlan } from './plan.js';
import { loadRank } from './rank.js';
import { generateOnRank } from './runner.js';

const kernels = new ReferenceKernels();
const prompt = [1, 8, 30, 2, 17, 5, 9, 11, 40, 3, 22, 7];

/** Zipf load over 8 experts whose hottest expert moves with the layer (a drift, as deeper layers show). */
function drifting(layers: number, experts = 8): number[][] {
  const z = zipfChoiceShares(experts, 2, 1.2);
  return Array.from({ length: layers }, (_, l) => z.map((_, e) => z[(e + experts - 3 * l) % experts]!));
}

test('per-layer placement follows each layer: its busiest rank is nearer the mean than one placement from the summed load', () => {
  const loads = drifting(3);
  const summed = loads[0]!.map((_, e) => loads.reduce((a, l) => a + l[e]!, 0));
  const one = balanceExperts(summed, 4, 4).perRank;
  const shared = layersMaxNodeShare(loads.map((l) => placementOf(l, one)));
  const own = layersMaxNodeShare(balanceLayers(loads, 4, 4));
  assert.ok(own < shared, `per layer ${own.toFixed(3)} against one placement ${shared.toFixed(3)}`);
  assert.ok(own <= 1.15, `per layer ${own.toFixed(3)}`);
});

test('experts placed per layer (copies, each layer its own sets) give the single-node tokens on every rank', async () => {
  const file = tinyModelFile({
    arch: 'qwen3moe',
    experts: 8,
    expertsUsed: 2,
    layers: 3,
    vocab: 96,
    seed: 21,
  });
  const single = await Model.load(file, kernels);
  const expected = (await generate(single, single.newSession(), prompt, { maxTokens: 8 })).tokens;
  for (const [nodes, direct] of [
    [2, false],
    [3, true],
  ] as const) {
    const layers = balanceLayers(drifting(3), nodes, Math.ceil(8 / nodes) + 1);
    const plan = buildPlan(single.config, file.tensors, {
      kind: 'ep',
      nodes,
      expertSets: layerExpertSets(layers),
    });
    const held = plan.ranks[0]!.shard.layerExperts!;
    assert.notDeepEqual(held[0], held[1], 'rank 0 holds other experts in layers 0 and 1');
    const world = await createLocalWorld(nodes, { timeoutMs: 10_000 });
    const exchange = direct
      ? { exchange: { provider: 'loopback' as const, host: '127.0.0.1', secret: 's', timeoutMs: 10_000 } }
      : {};
    const ranks = await Promise.all(
      world.map((w) => loadRank({ file, kernels, plan, world: w, ...exchange })),
    );
    try {
      ranks.forEach((r, i) =>
        r.model.shard.layerExperts!.forEach((l, layer) =>
          assert.deepEqual(l, plan.ranks[i]!.shard.layerExperts![layer]),
        ),
      );
      const results = await Promise.all(ranks.map((ctx) => generateOnRank(ctx, prompt, { maxTokens: 8 })));
      for (const r of results)
        assert.deepEqual(
          r.tokens,
          expected,
          `${nodes} ranks${direct ? ' (direct)' : ''}, rank ${r.metrics.rank}`,
        );
    } finally {
      await Promise.all(ranks.map((r) => r.exchange?.close()));
      await Promise.all(world.map((w) => w.close()));
    }
  }
});

test('a shard placed per layer counts the experts of each layer in its memory, not their union in every layer', () => {
  const file = tinyModelFile({
    arch: 'qwen3moe',
    experts: 8,
    expertsUsed: 2,
    layers: 3,
    vocab: 96,
    seed: 21,
  });
  const c = configOf(file);
  const shard = buildPlan(c, file.tensors, { kind: 'ep', nodes: 2 }).ranks[0]!.shard;
  const union = { ...shard, experts: [0, 1, 2, 3, 4, 5] };
  const perLayer = {
    ...union,
    layerExperts: [
      [0, 1],
      [2, 3],
      [4, 5],
    ],
  };
  const none = shardBytes(c, file.tensors, { ...shard, experts: [] });
  // one expert of one layer
  const one = (shardBytes(c, file.tensors, union) - none) / 18;
  assert.ok(one > 0);
  assert.equal(shardBytes(c, file.tensors, perLayer), none + 6 * one);
});

test('per-layer expert sets with a layer missing, or an expert held nowhere in a layer, are PAR_BAD_PLAN', () => {
  const file = tinyModelFile({
    arch: 'qwen3moe',
    experts: 8,
    expertsUsed: 2,
    layers: 3,
    vocab: 96,
    seed: 21,
  });
  const c = configOf(file);
  const all = [
    [0, 1, 2, 3],
    [4, 5, 6, 7],
  ];
  for (const layers of [
    [all, all],
    [
      all,
      all,
      [
        [0, 1, 2],
        [4, 5, 6, 7],
      ],
    ],
  ])
    assert.throws(
      () => buildPlan(c, file.tensors, { kind: 'ep', nodes: 2, expertSets: { layers } }),
      (e: unknown) => isTandemError(e) && e.code === 'PAR_BAD_PLAN' && /3 layers/.test(e.message),
    );
});

function configOf(file: ReturnType<typeof tinyModelFile>): ModelConfig {
  return configFromMetadata((k) => file.meta(k), new Map([...file.tensors].map(([n, t]) => [n, t.dims])));
}
