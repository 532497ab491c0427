import { test } from 'node:test';
import assert from 'node:assert/strict';
import { makeModel } from '../engine/format/make-model.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClusterSession } from './session.js';
import { startNode } from './node-agent.js';
import { isTandemError } from '../errors/index.js';
import { nodeSpeeds, probeSpeed, STREAM_PROBE_MAX_BYTES, STREAM_PROBE_MIN_BYTES } from './speed.js';

test('the probe measures a positive matvec speed on the reference and default kernels', async () => {
  const fast = await probeSpeed({ threads: 1 });
  const slow = await probeSpeed({ threads: 1, kernels: 'reference' });
  assert.ok(fast > 0 && slow > 0, `${fast} and ${slow} GFLOP/s`);
});

test('placement speeds: hostfile speed= wins, else measured speed relative to the fastest in quarter steps', () => {
  assert.deepEqual(nodeSpeeds([undefined, undefined, undefined], [40, 20, 38]), [1, 0.5, 1]);
  assert.deepEqual(nodeSpeeds([2, undefined], [10, 40]), [2, 1]);
  assert.deepEqual(nodeSpeeds([undefined, undefined], [undefined, 30]), [undefined, 1]);
  assert.deepEqual(nodeSpeeds([undefined], [1e-9 + 0]), [1]);
  assert.deepEqual(nodeSpeeds([undefined, undefined], [100, 1]), [1, 0.25]);
});

test('nodes report their measured speed and pipeline layers follow it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-speed-'));
  const path = join(dir, 'm.gguf');
  const shape = {
    layers: 8,
    embd: 64,
    ff: 128,
    heads: 2,
    kvHeads: 2,
    headDim: 32,
    vocab: 512,
    context: 64,
    experts: 0,
    expertsUsed: 0,
    expertFf: 0,
    sharedFf: 0,
  };
  await makeModel(path, { arch: 'llama', shape, type: 'f32', std: 0.3, seed: 2 });
  // Node 0 measures itself; node 1 reports a third of that (as a slower host would measure).
  const a = await startNode({ listen: '127.0.0.1:0', secret: 's', threads: 1, probe: true });
  const hello = await ClusterSession.connect([{ address: a.address }], 's');
  const measured = hello.infos[0]!.speed as number;
  hello.close();
  const b = await startNode({ listen: '127.0.0.1:0', secret: 's', threads: 1, speed: measured / 3 });
  const c = await startNode({ listen: '127.0.0.1:0', secret: 's', threads: 1, probe: false });
  try {
    assert.ok(typeof measured === 'number' && measured > 0, `node reports ${measured} GFLOP/s`);
    const session = await ClusterSession.connect([{ address: a.address }, { address: b.address }], 's');
    try {
      const placement = await session.load({
        model: path,
        parallel: 'pp',
        provider: 'loopback',
        contextLength: 64,
      });
      const layers = placement.plan.ranks.map((r) => r.shard.layers.end - r.shard.layers.start);
      assert.deepEqual(layers, [6, 2], 'layers in proportion to speed 1 : 0.25 (a third, in quarter steps)');
    } finally {
      session.close();
    }
    const plain = await ClusterSession.connect([{ address: c.address }], 's');
    assert.equal(plain.infos[0]!.speed, null, 'a node without a probe reports no speed');
    plain.close();
  } finally {
    await Promise.all([a.close(), b.close(), c.close()]);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a node streams weights for the memory ceiling on request and refuses a request out of range', async () => {
  const node = await startNode({ listen: '127.0.0.1:0', secret: 's', threads: 1, probe: false });
  const session = await ClusterSession.connect([{ address: node.address }], 's');
  try {
    const [rate] = await session.streamRates(STREAM_PROBE_MIN_BYTES, 20);
    assert.ok(typeof rate === 'number' && Number.isFinite(rate) && rate > 0, `${rate} bytes/s`);
    for (const [bytes, ms] of [
      [STREAM_PROBE_MAX_BYTES + 1, 20],
      [STREAM_PROBE_MIN_BYTES - 1, 20],
      [STREAM_PROBE_MIN_BYTES, 0],
    ] as const) {
      await assert.rejects(session.streamRates(bytes, ms), (e: unknown) => {
        assert.ok(isTandemError(e) && e.code === 'CLUSTER_PROTOCOL', String(e));
        assert.match((e as Error).message, /out of range/);
        return true;
      });
    }
    const [again] = await session.streamRates(STREAM_PROBE_MIN_BYTES, 20);
    assert.ok(again! > 0, 'the node still serves after refusing');
  } finally {
    session.close();
    await node.close();
  }
});
