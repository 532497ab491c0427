import { test } from 'node:test';
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import type { TandemError } from '../errors/index.js';
import { exchangeSpin, startNode } from './node-agent.js';
import { busyLine, ControlClient, type NodeBusy } from './protocol.js';

test('the tensor-parallel exchange spins through the compute only when every compute thread has a core', () => {
  const cores = availableParallelism();
  assert.equal(exchangeSpin(cores, 1), 2000);
  assert.equal(exchangeSpin(1, cores), 2000);
  assert.equal(exchangeSpin(cores + 1, 1), true, 'more nodes than cores: adaptive');
  assert.equal(exchangeSpin(2, cores), true, 'threads default to every core; two such nodes oversubscribe');
  assert.equal(exchangeSpin(2, undefined), true);
});

test('a node serving one coordinator tells the next that it waits, and for whom; it gets in once the first leaves', async () => {
  const secret = 'node-busy-test-secret-0123456789';
  const logs: string[] = [];
  const node = await startNode({
    listen: '127.0.0.1:0',
    secret,
    threads: 1,
    probe: false,
    log: (l) => logs.push(l),
  });
  const first = await ControlClient.connect(node.address, secret, 'node 1', 10_000);
  try {
    const heard: NodeBusy[] = [];
    await assert.rejects(
      ControlClient.connect(node.address, secret, 'node 1', 1000, undefined, (b) => heard.push(b)),
      (e: TandemError) => {
        assert.equal(e.code, 'CLUSTER_NODE_BUSY', e.message);
        assert.match(e.message, /serves another coordinator \(127\.0\.0\.1:\d+, since /);
        assert.equal(e.details.busyWith, `127.0.0.1:${first.localPort}`);
        return true;
      },
    );
    // the waiting coordinator heard it when it began to wait, for its progress line
    assert.equal(heard.length, 1);
    assert.deepEqual(
      [heard[0]?.label, heard[0]?.address, heard[0]?.from],
      ['node 1', node.address, `127.0.0.1:${first.localPort}`],
    );
    assert.match(busyLine(heard[0] as NodeBusy, 30_000), /^node 1 at .* waiting up to 30 s for it to end$/);
    // a waiting coordinator is admitted when the session ahead of it ends
    const second = ControlClient.connect(node.address, secret, 'node 1', 10_000);
    first.close();
    (await second).close();
  } finally {
    first.close();
    await node.close();
  }
  assert.ok(
    logs.some((l) => /waits for the session of 127\.0\.0\.1:\d+/.test(l)),
    logs.join('\n'),
  );
});
