// Node processes whose shards run on the GPU (`tandem node --kernels webgpu`) beside CPU nodes:
// tensor and pipeline parallel over 2 local nodes, one and both on WebGPU, tensor parallel over
// 3, hybrid 2 x 2, a mixture of experts under expert and tensor parallel (2 and 3 nodes), and
// experts re-placed while a stream
// decodes on GPU and CPU nodes, give the greedy tokens of the CPU cluster and of the
// single-process run; a GPU that is absent or refuses the
// shard fails the load with a typed error naming the node. Runs on Mesa's lavapipe where no GPU
// exists; skips with the reason where no adapter is found.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  ClusterSession,
  ClusterSlotModel,
  launchLocalNodes,
  ServingCluster,
  type LoadOptions,
  type LocalNodes,
  type RebalanceReport,
} from '../../src/cluster/index.js';
import {
  configFromMetadata,
  generate,
  GgufModelFile,
  openModel,
  type ModelConfig,
} from '../../src/engine/index.js';
import { greedy } from '../../src/engine/generate/generate.js';
import { tempModel } from '../../src/engine/testing/temp-model.js';
import { SKEWED_MOE, SKEWED_PROMPT } from './parallel-models.js';
import { runTandem } from '../../src/cli/testing.js';
import { isTandemError } from '../../src/errors/index.js';
import { probeAdapter } from '../../src/kernels/webgpu/index.js';
import type { ParallelKind } from '../../src/parallel/index.js';

const probe = await probeAdapter();
const skip = probe.found ? false : `no WebGPU adapter here: ${probe.reason}`;
const secret = 'webgpu-nodes-e2e-secret';
const prompt = [5, 6, 7, 8, 90, 1000, 33];
const steps = 6;
const q8 = tempModel('tandem-webgpu-nodes-', { arch: 'llama', shape: 'tiny', type: 'q8_0', seed: 4 });
const bf16 = tempModel('tandem-webgpu-nodes-bf16-', { arch: 'llama', shape: 'tiny', type: 'bf16', seed: 6 });
const moe = tempModel('tandem-webgpu-nodes-moe-', { arch: 'qwen3moe', shape: 'tiny', type: 'q8_0', seed: 7 });

const skewed = tempModel('tandem-webgpu-nodes-skew-', SKEWED_MOE);
const skewedPrompt = SKEWED_PROMPT;
const skewedSteps = 12;

function configOf(path: string): ModelConfig {
  const file = GgufModelFile.open(path);
  try {
    return configFromMetadata((k) => file.meta(k), new Map([...file.tensors].map(([n, t]) => [n, t.dims])));
  } finally {
    file.close();
  }
}

describe('webgpu nodes', { skip }, () => {
  let gpu: LocalNodes | undefined;
  let cpu: LocalNodes | undefined;
  const gpuLog: string[] = [];
  before(async () => {
    [gpu, cpu] = await Promise.all([
      launchLocalNodes(3, {
        secret,
        threads: 1,
        once: false,
        kernels: 'webgpu',
        log: (rank, line) => void gpuLog.push(`${rank}: ${line}`),
      }),
      launchLocalNodes(3, { secret, threads: 1, once: false }),
    ]);
  });
  after(async () => {
    await Promise.all([gpu?.stop(), cpu?.stop()]);
  });

  /** The greedy tokens of `parallel` over the nodes at `addresses` (shm between them). */
  async function run(model: string, addresses: readonly string[], parallel: ParallelKind): Promise<number[]> {
    const session = await ClusterSession.connect(
      addresses.map((address) => ({ address })),
      secret,
    );
    try {
      await session.load({
        model,
        parallel,
        provider: 'shm',
        greedy: true,
        contextLength: 64,
        commTimeoutMs: 20_000,
      });
      const result = await session.generate({ prompt, maxTokens: steps });
      assert.ok(
        result.nodes.some((m) => m.wireBytesPerToken > 0),
        `${parallel}: activations travel between the nodes`,
      );
      return result.tokens;
    } finally {
      session.close();
    }
  }

  async function single(model: string, tokens = prompt, maxTokens = steps): Promise<number[]> {
    const opened = await openModel(model, { backend: 'reference', threads: 1, tokenizer: false });
    try {
      const m = opened.model;
      return (await generate(m, m.newSession({ contextLength: 64 }), tokens, { maxTokens })).tokens;
    } finally {
      await opened.close();
    }
  }

  it('tp and pp: one node and both on WebGPU give the CPU cluster and the single-process tokens', async () => {
    const g = gpu!.addresses.slice(0, 2);
    const c = cpu!.addresses.slice(0, 2);
    const expected = await single(q8());
    for (const parallel of ['tp', 'pp'] as const) {
      assert.deepEqual(await run(q8(), c, parallel), expected, `${parallel}: the CPU cluster`);
      assert.deepEqual(await run(q8(), g, parallel), expected, `${parallel}: both nodes on WebGPU`);
      assert.deepEqual(await run(q8(), [g[0]!, c[1]!], parallel), expected, `${parallel}: rank 0 on WebGPU`);
      assert.deepEqual(await run(q8(), [c[0]!, g[1]!], parallel), expected, `${parallel}: rank 1 on WebGPU`);
    }
    for (const rank of [0, 1])
      assert.ok(
        gpuLog.some((l) => l.startsWith(`${rank}: `) && /webgpu: shards run on/.test(l)),
        `node ${rank} put its shards on the GPU: ${gpuLog.join(' | ')}`,
      );
  });

  it('tp over 3 nodes (heads cutting KV groups): GPU nodes give the CPU cluster and single-process tokens', async () => {
    const g = gpu!.addresses;
    const c = cpu!.addresses;
    const expected = await single(q8());
    assert.deepEqual(await run(q8(), c, 'tp'), expected, 'the CPU cluster');
    assert.deepEqual(await run(q8(), g, 'tp'), expected, 'every node on WebGPU');
    assert.deepEqual(await run(q8(), [c[0]!, g[1]!, c[2]!], 'tp'), expected, 'rank 1 on WebGPU');
  });

  it('a mixture of experts under ep and tp: GPU nodes give the CPU cluster and single-process tokens', async () => {
    const g = gpu!.addresses;
    const c = cpu!.addresses;
    const expected = await single(moe());
    assert.deepEqual(await run(moe(), c.slice(0, 2), 'ep'), expected, 'ep: the CPU cluster');
    assert.deepEqual(await run(moe(), g.slice(0, 2), 'ep'), expected, 'ep: both nodes on WebGPU');
    assert.deepEqual(await run(moe(), [c[0]!, g[1]!], 'ep'), expected, 'ep: rank 1 on WebGPU');
    assert.deepEqual(await run(moe(), [g[0]!, c[1]!], 'tp'), expected, 'tp: rank 0 on WebGPU');
    assert.deepEqual(await run(moe(), c, 'tp'), expected, 'tp over 3: the CPU cluster');
    assert.deepEqual(
      await run(moe(), [c[0]!, g[1]!, g[2]!], 'tp'),
      expected,
      'tp over 3: ranks 1 and 2 on WebGPU',
    );
  });

  it('hybrid 2 x 2 (tp inside each pipeline stage), GPU and CPU nodes in both stages: the single-process tokens', async () => {
    const g = gpu!.addresses;
    const c = cpu!.addresses;
    const expected = await single(q8());
    assert.deepEqual(await run(q8(), [g[0]!, c[0]!, c[1]!, g[1]!], 'hybrid'), expected, 'hybrid');
  });

  it("experts re-placed by the members' counters while a greedy stream decodes on GPU and CPU nodes: every member switches at one step, the tokens are one process's", async () => {
    const g = gpu!.addresses;
    const c = cpu!.addresses;
    const model = skewed();
    const expected = await single(model, skewedPrompt, skewedSteps);
    const session = await ClusterSession.connect(
      [g[0]!, c[1]!, g[2]!].map((address) => ({ address })),
      secret,
    );
    const load: LoadOptions = {
      model,
      parallel: 'ep',
      provider: 'shm',
      greedy: true,
      contextLength: 64,
      commTimeoutMs: 20_000,
    };
    const placement = await session.load(load);
    const serving = new ServingCluster(session, placement, load);
    try {
      const slots = new ClusterSlotModel(serving, configOf(model), 64);
      const seq = slots.newSession();
      const tokens = [(await slots.forward(skewedPrompt, seq, 'argmax')) as number];
      const before = session.placement!.plan;
      let rebalance: Promise<RebalanceReport> | undefined;
      while (tokens.length < skewedSteps) {
        // after a few steps the counters hold the prompt's routing: re-place, and keep decoding
        if (tokens.length === 3) rebalance = serving.rebalanceExperts();
        const [token] = await slots.forwardBatch([tokens[tokens.length - 1]!], [seq], ['argmax']);
        tokens.push(token as number);
      }
      const report = await rebalance!;
      assert.ok(report.switched, report.reason);
      assert.ok(report.after < report.before, `${report.after} < ${report.before}`);
      const after = session.placement!.plan;
      for (const r of [0, 2])
        assert.notDeepEqual(
          after.ranks[r]!.shard.layerExperts,
          before.ranks[r]!.shard.layerExperts,
          `GPU node ${r} holds other experts`,
        );
      assert.deepEqual(tokens, expected, "greedy tokens across the switch equal one process's");
      assert.equal(slots.heals.length, 0, 'no step failed or was replayed');
      // after the switch the GPU nodes run the experts they were given: another stream on the new placement
      const again = await slots.forward(skewedPrompt, slots.newSession());
      assert.ok(again instanceof Float32Array, 'forward answers the logits by default');
      assert.equal(greedy(again), expected[0], 'a new stream on the new placement');
    } finally {
      serving.close();
    }
  });

  it('tandem run --nodes 2 --kernels webgpu: the single-process tokens', async () => {
    const args = ['run', q8(), '--prompt-tokens', prompt.join(','), '--max-tokens', String(steps)];
    const r = runTandem([
      ...args,
      '--temperature',
      '0',
      '--json',
      '--nodes',
      '2',
      '--parallel',
      'pp',
      '--kernels',
      'webgpu',
    ]);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual((JSON.parse(r.stdout) as { tokens: number[] }).tokens, await single(q8()));
  });

  it('a shard the GPU refuses fails the load with a typed error naming the node', async () => {
    await assert.rejects(
      run(bf16(), [cpu!.addresses[0]!, gpu!.addresses[1]!], 'tp'),
      (e) =>
        isTandemError(e, 'KERNELS_DEVICE_LIMIT') &&
        /node 1 \(127\.0\.0\.1:\d+\)/.test(e.message) &&
        /--kernels webgpu on .*\(rank 1\): tensor \S+ is BF16/.test(e.message),
    );
  });

  it('a node without a GPU fails the load with a typed error naming it', async () => {
    // the launcher hands its environment to the processes it spawns (synchronously, at the call)
    process.env.TANDEM_WEBGPU = 'off';
    const launching = launchLocalNodes(1, { secret, threads: 1, once: false, kernels: 'webgpu' });
    delete process.env.TANDEM_WEBGPU;
    const off = await launching;
    try {
      await assert.rejects(
        run(q8(), [cpu!.addresses[0]!, off.addresses[0]!], 'pp'),
        (e) =>
          isTandemError(e, 'KERNELS_NO_ADAPTER') &&
          /node 1 \(127\.0\.0\.1:\d+\): --kernels webgpu on .*: WebGPU is turned off here/.test(e.message),
      );
    } finally {
      await off.stop();
    }
  });
});
