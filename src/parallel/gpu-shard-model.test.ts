import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createLocalWorld } from '../collectives/local-world.js';
import { generate } from '../engine/generate/generate.js';
import { configFromMetadata, type ModelConfig } from '../engine/model/config.js';
import { Model } from '../engine/model/model.js';
import { matrixShape, type ModelFile } from '../engine/model/model-file.js';
import { tinyModelFile } from '../engine/model/tiny-model.js';
import { isTandemError } from '../errors/index.js';
import { ReferenceKernels } from '../kernels/index.js';
import { GpuDevice, probeAdapter } from '../kernels/webgpu/index.js';
import { refuseGpuShard } from './gpu-shard-model.js';
import { buildPlan, type ParallelKind, type ParallelPlan } from './plan.js';
import { loadRank, type LoadedRank } from './rank.js';
import { generateOnRank } from './runner.js';
import { forwardBatchOnRank, forwardOnRank, logitsRank } from './serving-step.js';

/**
 * Ranks whose shards run on the GPU (GpuShardModel) beside ranks on the CPU engine, in one
 * process over a local world: tensor parallel (each layer half's partial output read back,
 * summed by the group's ShardComm, written back) and pipeline parallel (the stage boundary's
 * hidden states read back and uploaded). Greedy tokens must equal the single-process CPU run
 * on the reference kernels and the GPU holding the whole model: the GPU sums in f32 trees where
 * the reference sums in f64, so logits differ in the last bits, never enough to change a
 * greedy pick on these models (their top two logits are far apart).
 */
const probe = await probeAdapter();
const skip = probe.found ? false : `no WebGPU adapter here: ${probe.reason}`;
const kernels = new ReferenceKernels();
const steps = 6;

const dense = tinyModelFile({
  arch: 'llama',
  heads: 4,
  kvHeads: 2,
  width: 32,
  ff: 64,
  layers: 3,
  vocab: 96,
  context: 320,
  seed: 3,
});
const qwen2 = tinyModelFile({
  arch: 'qwen2',
  heads: 4,
  kvHeads: 2,
  width: 32,
  ff: 64,
  layers: 2,
  vocab: 96,
  seed: 4,
});

async function single(file: ModelFile, prompt: readonly number[]): Promise<number[]> {
  const model = await Model.load(file, kernels);
  return (await generate(model, model.newSession(), prompt, { maxTokens: steps })).tokens;
}

/** Loads every rank of `plan` (rank r on the GPU where gpu[r]), runs `work` on them, frees them. */
async function withRanks<T>(
  file: ModelFile,
  plan: ParallelPlan,
  gpu: readonly boolean[],
  work: (ranks: LoadedRank[]) => Promise<T>,
  direct = false,
): Promise<T> {
  const world = await createLocalWorld(plan.nodes, { timeoutMs: 20_000 });
  const devices = await Promise.all(gpu.map((g) => (g ? GpuDevice.open() : undefined)));
  const exchange = direct
    ? { exchange: { provider: 'loopback' as const, host: '127.0.0.1', secret: 's', timeoutMs: 20_000 } }
    : {};
  const loads = world.map((w, r) => {
    const device = devices[r];
    return loadRank({ file, plan, world: w, ...exchange, ...(device ? { gpu: device } : { kernels }) });
  });
  const ranks = (await Promise.allSettled(loads)).flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  try {
    const failed = (await Promise.allSettled(loads)).find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
    return await work(ranks);
  } finally {
    for (const r of ranks) r.model.destroy?.();
    await Promise.all(ranks.map((r) => r.exchange?.close()));
    await Promise.all(world.map((w) => w.close()));
    for (const d of devices) d?.destroy();
  }
}

/** Every rank's greedy tokens; `gpu[r]`: rank r runs on the GPU. */
async function onRanks(
  file: ModelFile,
  plan: ParallelPlan,
  gpu: readonly boolean[],
  prompt: readonly number[],
  direct = false,
): Promise<number[][]> {
  return withRanks(
    file,
    plan,
    gpu,
    async (ranks) => {
      const results = await Promise.all(
        ranks.map((ctx) => generateOnRank(ctx, prompt, { maxTokens: steps })),
      );
      for (const [r, ctx] of ranks.entries())
        if (plan.nodes > 1)
          assert.ok(
            results[r]!.metrics.wireBytesPerToken > 0 || ctx.me.stage > 0 || plan.stages === 1,
            'rank sends',
          );
      return results.map((r) => r.tokens);
    },
    direct,
  );
}

function configOf(file: ModelFile): ModelConfig {
  return configFromMetadata((k) => file.meta(k), new Map([...file.tensors].map(([n, t]) => [n, t.dims])));
}

function plan(file: ModelFile, kind: ParallelKind, nodes: number): ParallelPlan {
  return buildPlan(configOf(file), file.tensors, { kind, nodes });
}

test(
  'webgpu shards: tensor parallel, one rank and both on the GPU, give the single-process tokens',
  { skip },
  async () => {
    const prompt = [1, 8, 30, 2, 17, 5, 9, 11, 40, 3];
    for (const file of [dense, qwen2]) {
      const expected = await single(file, prompt);
      const whole = await onRanks(file, plan(file, 'tp', 1), [true], prompt);
      assert.deepEqual(whole[0], expected, 'the whole model on one GPU');
      const tp = plan(file, 'tp', 2);
      for (const gpu of [
        [false, true],
        [true, true],
      ])
        for (const tokens of await onRanks(file, tp, gpu, prompt))
          assert.deepEqual(tokens, expected, `tp ${gpu}`);
    }
    // the direct exchange (shm nodes' path) sums the GPU rank's parts as the communicator does
    const expected = await single(dense, prompt);
    for (const tokens of await onRanks(dense, plan(dense, 'tp', 2), [true, false], prompt, true))
      assert.deepEqual(tokens, expected, 'tp over the direct exchange');
  },
);

test(
  'webgpu shards: tensor parallel over 3 ranks (heads cutting KV groups, sums in several pieces)',
  { skip },
  async () => {
    // 6 heads over 2 KV heads on 3 ranks: each rank's 2 heads straddle a KV group, and the
    // group adds each rank's o and down outputs in 2 pieces of the leaf tree
    const wide = tinyModelFile({
      arch: 'llama',
      heads: 6,
      kvHeads: 2,
      width: 48,
      ff: 96,
      layers: 2,
      vocab: 96,
      seed: 7,
    });
    const tp = plan(wide, 'tp', 3);
    assert.equal(tp.ranks[1]!.shard.heads.start, 2, 'rank 1 starts inside the first KV group');
    const prompt = [3, 14, 15, 92, 65, 35, 8];
    const expected = await single(wide, prompt);
    for (const gpu of [
      [false, true, false],
      [true, true, true],
    ])
      for (const tokens of await onRanks(wide, tp, gpu, prompt))
        assert.deepEqual(tokens, expected, `tp ${gpu}`);
  },
);

/** A qwen3moe of 6 experts; tests that hook its reads make their own with tinyModelFile(qwen3moeOptions). */
const qwen3moeOptions = {
  arch: 'qwen3moe',
  heads: 4,
  kvHeads: 2,
  width: 32,
  ff: 32,
  experts: 6,
  expertsUsed: 2,
  layers: 2,
  vocab: 96,
  seed: 8,
} as const;
const qwen3moe = tinyModelFile(qwen3moeOptions);
const qwen2moe = tinyModelFile({
  arch: 'qwen2moe',
  heads: 4,
  kvHeads: 2,
  width: 32,
  ff: 32,
  experts: 4,
  expertsUsed: 2,
  sharedFf: 32,
  layers: 2,
  vocab: 96,
  seed: 9,
});

test(
  'webgpu shards: mixtures of experts under expert parallel give the single-process tokens',
  { skip },
  async () => {
    const prompt = [7, 21, 3, 60, 12, 44, 5, 81];
    const expected = await single(qwen3moe, prompt);
    for (const gpu of [
      [false, true],
      [true, true],
    ])
      for (const tokens of await onRanks(qwen3moe, plan(qwen3moe, 'ep', 2), gpu, prompt))
        assert.deepEqual(tokens, expected, `ep ${gpu}`);
    // experts placed per layer over 3 ranks (rank 0 holds one expert in layer 1)
    const layers = [
      [
        [0, 1],
        [2, 3],
        [4, 5],
      ],
      [[5], [0, 2, 4], [1, 3]],
    ];
    const perLayer = buildPlan(configOf(qwen3moe), qwen3moe.tensors, {
      kind: 'ep',
      nodes: 3,
      expertSets: { layers },
    });
    for (const tokens of await onRanks(qwen3moe, perLayer, [true, false, true], prompt))
      assert.deepEqual(tokens, expected, 'ep by layer over 3 ranks');
    // the direct exchange (shm nodes' path) on a prompt routed in one pass of more than 64 rows
    // (the GPU rank's share is rows 50-99), and qwen2moe's shared expert summed across the group
    const long = Array.from({ length: 100 }, (_, i) => 1 + ((i * 29) % 95));
    for (const tokens of await onRanks(qwen3moe, plan(qwen3moe, 'ep', 2), [false, true], long, true))
      assert.deepEqual(tokens, await single(qwen3moe, long), 'ep over the direct exchange, 100 tokens');
    for (const tokens of await onRanks(qwen2moe, plan(qwen2moe, 'ep', 2), [false, true], prompt))
      assert.deepEqual(tokens, await single(qwen2moe, prompt), 'qwen2moe ep');
  },
);

test(
  'webgpu shards: an expert-parallel rank reads the rows of the experts it holds, no others',
  { skip },
  async () => {
    const file = tinyModelFile(qwen3moeOptions);
    const rowsRead = new Map<string, number>();
    const readRows = file.readRows.bind(file);
    file.readRows = (name, start, count, into) => {
      rowsRead.set(name, (rowsRead.get(name) ?? 0) + count);
      return readRows(name, start, count, into);
    };
    await withRanks(file, plan(file, 'ep', 2), [true, true], async () => undefined);
    // the two ranks hold 3 experts each: together they read each expert tensor's rows once
    for (const name of ['blk.0.ffn_gate_exps.weight', 'blk.1.ffn_down_exps.weight'])
      assert.equal(rowsRead.get(name), matrixShape(file.tensors.get(name)!).rows, name);
  },
);

test(
  'webgpu shards: mixtures of experts under tensor parallel (experts cut) give the single-process tokens',
  { skip },
  async () => {
    const prompt = [7, 21, 3, 60, 12, 44, 5, 81];
    for (const file of [qwen3moe, qwen2moe])
      for (const tokens of await onRanks(file, plan(file, 'tp', 2), [true, false], prompt))
        assert.deepEqual(tokens, await single(file, prompt), `${file.meta('general.architecture')} tp`);
    const hybrid = buildPlan(configOf(qwen2moe), qwen2moe.tensors, { kind: 'hybrid', nodes: 4, tpSize: 2 });
    for (const tokens of await onRanks(qwen2moe, hybrid, [true, true, false, true], prompt))
      assert.deepEqual(tokens, await single(qwen2moe, prompt), 'hybrid 2 x 2');
    // 3 ranks: every expert's and the shared expert's hidden units cut in 3, heads cutting a KV group
    const wideMoe = tinyModelFile({
      arch: 'qwen2moe',
      heads: 6,
      kvHeads: 2,
      width: 48,
      ff: 96,
      experts: 4,
      expertsUsed: 2,
      sharedFf: 96,
      layers: 2,
      vocab: 96,
      seed: 10,
    });
    const tp3 = plan(wideMoe, 'tp', 3);
    assert.ok(tp3.ranks.every((r) => r.shard.expertFfn.end - r.shard.expertFfn.start < 96));
    for (const tokens of await onRanks(wideMoe, tp3, [false, true, true], prompt))
      assert.deepEqual(tokens, await single(wideMoe, prompt), 'qwen2moe tp over 3');
  },
);

test(
  'webgpu shards: pipeline stages on the GPU and the CPU give the single-process tokens',
  { skip },
  async () => {
    const prompt = [4, 9, 2, 33, 70, 12, 5];
    const expected = await single(dense, prompt);
    const pp = plan(dense, 'pp', 2);
    for (const gpu of [
      [true, false],
      [false, true],
      [true, true],
    ])
      for (const tokens of await onRanks(dense, pp, gpu, prompt))
        assert.deepEqual(tokens, expected, `pp ${gpu}`);
    const hybrid = buildPlan(configOf(dense), dense.tensors, { kind: 'hybrid', nodes: 4, tpSize: 2 });
    for (const tokens of await onRanks(dense, hybrid, [true, false, false, true], prompt))
      assert.deepEqual(tokens, expected, 'hybrid 2 x 2');
  },
);

test(
  'webgpu shards: a prompt past one pass (270 tokens) is cut where the CPU rank cuts it',
  { skip },
  async () => {
    const prompt = Array.from({ length: 270 }, (_, i) => 1 + ((i * 37) % 95));
    const expected = await single(dense, prompt);
    for (const tokens of await onRanks(dense, plan(dense, 'tp', 2), [false, true], prompt))
      assert.deepEqual(tokens, expected, 'tp');
    for (const tokens of await onRanks(dense, plan(dense, 'pp', 2), [true, false], prompt))
      assert.deepEqual(tokens, expected, 'pp');
  },
);

test('webgpu shards: a serving decode step of several sequences, GPU and CPU ranks', { skip }, async () => {
  const prompts = [[5], [6, 7, 8], [9, 10, 11, 12, 13]];
  const next = [20, 21, 22];
  const argmax = (l: Float32Array): number => l.indexOf(Math.max(...l));
  // a decode batch through the MoE layers too: expert parallel routes each row on the GPU rank
  for (const [file, kinds] of [
    [dense, ['tp', 'pp']],
    [qwen3moe, ['ep']],
  ] as const) {
    const cpu = await Model.load(file, kernels);
    const cpuCaches = prompts.map(() => cpu.newSession());
    for (const [i, p] of prompts.entries()) await cpu.forward(p, cpuCaches[i]!);
    const want = (await cpu.forwardBatch(next, cpuCaches)).map(argmax);
    for (const kind of kinds) {
      const got = await withRanks(file, plan(file, kind, 2), [true, false], async (ranks) => {
        const caches = ranks.map((ctx) => prompts.map(() => ctx.model.newSession()));
        for (const [i, p] of prompts.entries())
          await Promise.all(ranks.map((ctx, r) => forwardOnRank(ctx, caches[r]![i]!, p)));
        const rows = await Promise.all(ranks.map((ctx, r) => forwardBatchOnRank(ctx, caches[r]!, next)));
        return rows[logitsRank(ranks[0]!.plan)]!.map(argmax);
      });
      assert.deepEqual(got, want, kind);
    }
  }
});

/**
 * `kind` over 2 ranks where rank 1 holds none of the units `empty` names and rank 0 all of
 * them (the split a block size larger than a rank's share gives: Q4_K's 256 columns over an
 * FFN of 256 units on 2 ranks).
 */
function withEmpty(
  file: ModelFile,
  kind: ParallelKind,
  empty: readonly ('ffn' | 'expertFfn' | 'sharedFfn')[],
): ParallelPlan {
  const p = plan(file, kind, 2);
  const [a, b] = [p.ranks[0]!, p.ranks[1]!];
  for (const k of empty) {
    const end = b.shard[k].end;
    a.shard = { ...a.shard, [k]: { start: 0, end } };
    b.shard = { ...b.shard, [k]: { start: end, end } };
  }
  return p;
}

test(
  "webgpu shards: a GPU rank holding none of a layer's FFN, expert or shared-expert units adds zeros to its group's sums",
  { skip },
  async () => {
    const prompt = [7, 21, 3, 60, 12, 44, 5, 81];
    const llama = tinyModelFile({
      arch: 'llama',
      heads: 4,
      kvHeads: 2,
      width: 32,
      ff: 32,
      layers: 2,
      vocab: 96,
      seed: 12,
    });
    for (const [file, kind, empty] of [
      [llama, 'tp', ['ffn']],
      [qwen2moe, 'tp', ['expertFfn']],
      [qwen2moe, 'tp', ['expertFfn', 'sharedFfn']],
      [qwen2moe, 'ep', ['sharedFfn']],
    ] as const) {
      // loaded without a refusal: KERNELS_DEVICE_LIMIT would fail the load
      const cut = withEmpty(file, kind, empty);
      for (const tokens of await onRanks(file, cut, [false, true], prompt))
        assert.deepEqual(tokens, await single(file, prompt), `${kind}, rank 1 without ${empty.join(', ')}`);
    }
  },
);

test(
  'webgpu shards: a shard the GPU does not run is refused with a typed error naming why',
  { skip },
  async () => {
    const cut = plan(dense, 'tp', 2);
    cut.ranks[1]!.shard = { ...cut.ranks[1]!.shard, heads: { start: 4, end: 4 } };
    cut.ranks[0]!.shard = { ...cut.ranks[0]!.shard, heads: { start: 0, end: 4 } };
    await assert.rejects(
      withRanks(dense, cut, [false, true], async () => undefined),
      (e) =>
        isTandemError(e, 'KERNELS_DEVICE_LIMIT') &&
        /this rank's shard: it holds no attention heads/.test(e.message),
    );
    const device = await GpuDevice.open();
    try {
      const small = { ...device.limits, maxStorageBufferBindingSize: 1024, maxBufferSize: 1024 };
      const c = configOf(dense);
      const shard = plan(dense, 'tp', 2).ranks[1]!.shard;
      const refusal = refuseGpuShard(dense, shard, [shard, shard], 1, { limits: small });
      assert.match(refusal ?? '', /maxStorageBufferBindingSize 1024/);
      assert.ok(c.blockCount > 0);
    } finally {
      device.destroy();
    }
  },
);
