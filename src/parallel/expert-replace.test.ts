import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createLocalWorld } from '../collectives/local-world.js';
import { isTandemError } from '../errors/index.js';
import { createKernels, ReferenceKernels, type Kernels } from '../kernels/index.js';
import { GgmlType, type GgmlTypeId } from '../kernels/types.js';
import { GpuDevice, gpuRowBytes, probeAdapter } from '../kernels/webgpu/index.js';
import { generate } from '../engine/generate/generate.js';
import type { ModelConfig } from '../engine/model/config.js';
import { Model } from '../engine/model/model.js';
import { expertsInLayer } from '../engine/model/shard.js';
import { tinyModelFile } from '../engine/model/tiny-model.js';
import { balanceLayers, layerExpertSets } from './expert-balance.js';
import { RankExperts } from './expert-replace.js';
import { GpuShardModel } from './gpu-shard-model.js';
import { buildPlan } from './plan.js';
import { loadRank, type LoadedRank } from './rank.js';
import { forwardBatchOnRank, forwardOnRank } from './serving-step.js';

const file = tinyModelFile({ arch: 'qwen3moe', experts: 8, expertsUsed: 2, layers: 3, vocab: 96, seed: 31 });
const prompt = [4, 9, 33, 2, 71, 5, 18, 40];

function argmax(x: Float32Array): number {
  let best = 0;
  for (let i = 1; i < x.length; i++) if (x[i]! > x[best]!) best = i;
  return best;
}

/** Greedy decode of `steps` tokens on every rank in lockstep; `between(step)` runs between two steps on every rank. */
async function decode(
  ranks: LoadedRank[],
  steps: number,
  between: (step: number) => Promise<void>,
): Promise<number[]> {
  const caches = ranks.map((r) => r.model.newSession({ contextLength: 64 }));
  const first = await Promise.all(ranks.map((r, i) => forwardOnRank(r, caches[i]!, prompt)));
  const out = [argmax(first[0]!)];
  for (let s = 1; s < steps; s++) {
    await between(s);
    const rows = await Promise.all(ranks.map((r, i) => forwardBatchOnRank(r, [caches[i]!], [out[s - 1]!])));
    out.push(argmax(rows[0]![0]!));
  }
  return out;
}

test("experts staged beside the old ones while steps run, switched between two steps on every rank: the greedy tokens stay one node's", async () => {
  const single = await Model.load(file, new ReferenceKernels());
  const expected = (await generate(single, single.newSession(), prompt, { maxTokens: 10 })).tokens;
  const kernels = new ReferenceKernels();
  const plan = buildPlan(single.config, file.tensors, { kind: 'ep', nodes: 2 });
  const skew = Array.from({ length: 3 }, (_, l) =>
    Array.from({ length: 8 }, (_, e) => 1 / (1 + ((e + 3 * l) % 8)) ** 2),
  );
  const next = buildPlan(single.config, file.tensors, {
    kind: 'ep',
    nodes: 2,
    expertSets: layerExpertSets(balanceLayers(skew, 2, 5)),
  });
  const world = await createLocalWorld(2, { timeoutMs: 10_000 });
  const ranks = await Promise.all(world.map((w) => loadRank({ file, kernels, plan, world: w })));
  try {
    const experts = ranks.map((r) => new RankExperts(r, file));
    let staging: Promise<unknown> | undefined;
    const tokens = await decode(ranks, 10, async (step) => {
      // staged at step 3 without awaiting (steps go on), switched at step 6 on both ranks
      if (step === 3) staging = Promise.all(experts.map((x) => x.stage(7, next, { provider: 'loopback' })));
      if (step === 6) {
        await staging;
        for (const x of experts) assert.ok(x.switch(7).dropped > 0);
      }
    });
    assert.deepEqual(tokens, expected);
    ranks.forEach((r, i) => assert.deepEqual(r.model.shard.layerExperts, next.ranks[i]!.shard.layerExperts));
    assert.throws(() => experts[0]!.switch(7), /no staged placement 7/);
    assert.ok(experts[0]!.counts()!.totals.reduce((a, b) => a + b, 0) > 0, 'the counters count');
  } finally {
    await Promise.all(world.map((w) => w.close()));
  }
});

const probe = await probeAdapter();
const noGpu = probe.found ? false : `no WebGPU adapter here: ${probe.reason}`;

/** Bytes one routed expert of model layer l takes on the GPU (its gate, up and down as uploaded). */
function gpuExpertBytes(c: ModelConfig, l: number): number {
  const type = (n: string): GgmlTypeId => file.tensors.get(`blk.${l}.${n}.weight`)!.type as GgmlTypeId;
  const ff = c.expertFeedForwardLength;
  const width = c.embeddingLength;
  return (
    ff * (gpuRowBytes(type('ffn_gate_exps'), width) + gpuRowBytes(type('ffn_up_exps'), width)) +
    width * gpuRowBytes(type('ffn_down_exps'), ff)
  );
}

test(
  "experts re-placed on GPU shards (one rank and both on WebGPU): staged while steps run, switched between two steps, the tokens stay one node's and the let-go experts leave the GPU",
  { skip: noGpu },
  async () => {
    const single = await Model.load(file, new ReferenceKernels());
    const c = single.config;
    const expected = (await generate(single, single.newSession(), prompt, { maxTokens: 10 })).tokens;
    const plan = buildPlan(c, file.tensors, { kind: 'ep', nodes: 2 });
    const skew = Array.from({ length: 3 }, (_, l) =>
      Array.from({ length: 8 }, (_, e) => 1 / (1 + ((e + 5 * l) % 8)) ** 2),
    );
    const next = buildPlan(c, file.tensors, {
      kind: 'ep',
      nodes: 2,
      expertSets: layerExpertSets(balanceLayers(skew, 2, 5)),
    });
    for (const onGpu of [
      [false, true],
      [true, true],
    ]) {
      const devices = await Promise.all(onGpu.map((g) => (g ? GpuDevice.open() : undefined)));
      const world = await createLocalWorld(2, { timeoutMs: 20_000 });
      const ranks = await Promise.all(
        world.map((w, r) => {
          const gpu = devices[r];
          return loadRank({ file, plan, world: w, ...(gpu ? { gpu } : { kernels: new ReferenceKernels() }) });
        }),
      );
      try {
        const gpuRank = ranks[1]!.model;
        assert.ok(gpuRank instanceof GpuShardModel, 'rank 1 holds its shard on the GPU');
        const bytesBefore = gpuRank.llama.weightBytes;
        const experts = ranks.map((r) => new RankExperts(r, file));
        let staging: Promise<unknown> | undefined;
        let dropped: number[] = [];
        const tokens = await decode(ranks, 10, async (step) => {
          // staged twice without awaiting (the first one let go unswitched), switched at step 6
          if (step === 2) await Promise.all(experts.map((x) => x.stage(8, next, { provider: 'loopback' })));
          if (step === 3)
            staging = Promise.all(experts.map((x) => x.stage(9, next, { provider: 'loopback' })));
          if (step === 6) {
            await staging;
            dropped = experts.map((x) => x.switch(9).dropped);
          }
        });
        assert.deepEqual(tokens, expected, `greedy tokens across the switch, GPU ranks ${onGpu}`);
        assert.ok(
          dropped.every((d) => d > 0),
          `every rank let experts go: ${dropped}`,
        );
        ranks.forEach((r, i) =>
          assert.deepEqual(r.model.shard.layerExperts, next.ranks[i]!.shard.layerExperts),
        );
        const was = plan.ranks[1]!.shard;
        const now = next.ranks[1]!.shard;
        let delta = 0;
        for (let l = 0; l < c.blockCount; l++)
          delta += (expertsInLayer(now, l).length - expertsInLayer(was, l).length) * gpuExpertBytes(c, l);
        assert.equal(gpuRank.llama.weightBytes, bytesBefore + delta, 'the GPU holds exactly the new experts');
        assert.ok(
          experts[1]!.counts()!.totals.reduce((a, b) => a + b, 0) > 0,
          "the GPU rank's counters count",
        );
      } finally {
        for (const r of ranks) r.model.destroy?.();
        await Promise.all(world.map((w) => w.close()));
        for (const d of devices) d?.destroy();
      }
    }
  },
);

test('a staged placement over the memory limit, or one that moves more than experts, is refused and the old one stays', async () => {
  const kernels = new ReferenceKernels();
  const c = (await Model.load(file, kernels)).config;
  const plan = buildPlan(c, file.tensors, { kind: 'ep', nodes: 2 });
  const world = await createLocalWorld(2, { timeoutMs: 10_000 });
  const ranks = await Promise.all(world.map((w) => loadRank({ file, kernels, plan, world: w })));
  try {
    const x = new RankExperts(ranks[0]!, file);
    const all = {
      layers: Array.from({ length: 3 }, () => [
        [0, 1, 2, 3, 4, 5, 6, 7],
        [4, 5, 6, 7],
      ]),
    };
    const more = buildPlan(c, file.tensors, { kind: 'ep', nodes: 2, expertSets: all });
    await assert.rejects(
      x.stage(1, more, { provider: 'loopback', memLimit: 1000 }),
      (e: unknown) => isTandemError(e) && e.code === 'PAR_NO_FIT' && /beside the old ones/.test(e.message),
    );
    const tp = buildPlan(c, file.tensors, { kind: 'tp', nodes: 2 });
    await assert.rejects(x.stage(2, tp, { provider: 'loopback' }), /changes more than the experts/);
    assert.deepEqual(ranks[0]!.model.shard.experts, plan.ranks[0]!.shard.experts);
  } finally {
    await Promise.all(world.map((w) => w.close()));
  }
});

test("a released weight's memory holds the next weight of its shape (fast kernels)", async () => {
  const kernels: Kernels = await createKernels({ threads: 1, backend: 'wasm' });
  try {
    const source = (fill: number) => ({
      type: GgmlType.F32,
      rows: 8,
      cols: 64,
      data: new Uint8Array(new Float32Array(8 * 64).fill(fill).buffer),
    });
    const a = kernels.uploadWeight(source(1));
    const y = new Float32Array(8);
    kernels.matvec(a, new Float32Array(64).fill(1), y);
    assert.equal(y[0], 64);
    assert.ok(kernels.releaseWeight, 'the fast kernels release weights');
    kernels.releaseWeight(a);
    const b = kernels.uploadWeight(source(2));
    assert.equal(
      (b as unknown as { ptr: number }).ptr,
      (a as unknown as { ptr: number }).ptr,
      'the same room',
    );
    kernels.matvec(b, new Float32Array(64).fill(1), y);
    assert.equal(y[0], 128);
  } finally {
    await kernels.close();
  }
});
