import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Access, expectSuccess, type CompletionQueue, type QueuePair } from '../../src/fabric/index.js';
import { isTandemError } from '../../src/errors/index.js';
import { RdmaDevice } from '../../src/fabric/rdma-provider.js';

/**
 * The queue pairs of an rdma device complete into one verbs completion queue (a second once
 * the first has no room), and each completion still reaches the fabric CQ its queue pair was
 * given: three connections, each with its own send and receive CQ on both ends, one write with
 * immediate each way per connection. Skipped where there is no device (the soft-RoCE guest's
 * jobs run it).
 */
const device = process.env['TANDEM_RDMA_DEVICE'];
const SECRET = 'shared-cq-test-secret';
const WAIT = { timeoutMs: 30_000, max: 8 };

interface End {
  qp: QueuePair;
  cq: CompletionQueue;
  recvCq: CompletionQueue;
}

const skip = device === undefined ? 'needs an RDMA device (TANDEM_RDMA_DEVICE; npm run test:rdma)' : false;

/** Three connections between two devices whose shared completion queues hold `cqDepth` entries each. */
async function threeConnections(cqDepth: number | undefined, cqs: number): Promise<void> {
  const options = { name: device as string, ...(cqDepth ? { cqDepth } : {}) };
  const a = new RdmaDevice(options);
  const b = new RdmaDevice(options);
  try {
    const pa = a.allocPd();
    const pb = b.allocPd();
    const listener = await b.listen({ host: '127.0.0.1', port: 0, secret: SECRET });
    const src = pa.allocate(64, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
    const dst = pb.allocate(64, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
    src.buffer.fill(9);
    const pairs: [End, End][] = [];
    for (let i = 0; i < 3; i++) {
      const ea = { cq: a.createCq(), recvCq: a.createCq() };
      // a wait on a CQ sleeps on the shared queue's channel, even before a queue pair exists
      if (i === 0) assert.equal(a.verbsCqCount, 1, 'a CQ alone has the shared queue');
      const eb = { cq: b.createCq(), recvCq: b.createCq() };
      const [qa, qb] = await Promise.all([
        a.connect({ host: '127.0.0.1', port: listener.port, secret: SECRET, pd: pa, ...ea }),
        listener.accept({ pd: pb, ...eb }),
      ]);
      pairs.push([
        { qp: qa, ...ea },
        { qp: qb, ...eb },
      ]);
    }
    assert.equal(a.verbsCqCount, cqs, `${cqs} verbs CQ(s) behind six fabric CQs`);
    assert.equal(b.verbsCqCount, cqs);
    for (const [i, [ea, eb]] of pairs.entries()) {
      eb.qp.postRecv({ wrId: 100 + i, sgl: [] });
      ea.qp.postRecv({ wrId: 200 + i, sgl: [] });
      ea.qp.postSend({
        wrId: i,
        opcode: 'write_imm',
        imm: i,
        sgl: [src.sge(8 * i, 8)],
        remote: dst.remote(8 * i),
      });
      eb.qp.postSend({
        wrId: 10 + i,
        opcode: 'write_imm',
        imm: 10 + i,
        sgl: [dst.sge(8 * i, 8)],
        remote: src.remote(32 + 8 * i),
      });
    }
    for (const [i, [ea, eb]] of pairs.entries()) {
      const [sa] = expectSuccess(await ea.cq.wait(WAIT));
      const [ra] = expectSuccess(await ea.recvCq.wait(WAIT));
      const [sb] = expectSuccess(await eb.cq.wait(WAIT));
      const [rb] = expectSuccess(await eb.recvCq.wait(WAIT));
      assert.deepEqual([sa?.wrId, sa?.opcode], [i, 'write_imm'], `connection ${i}: a's send CQ`);
      assert.deepEqual([rb?.wrId, rb?.imm], [100 + i, i], `connection ${i}: b's receive CQ`);
      assert.deepEqual([sb?.wrId, sb?.opcode], [10 + i, 'write_imm'], `connection ${i}: b's send CQ`);
      assert.deepEqual([ra?.wrId, ra?.imm], [200 + i, 10 + i], `connection ${i}: a's receive CQ`);
    }
    for (const [ea, eb] of pairs)
      for (const cq of [ea.cq, ea.recvCq, eb.cq, eb.recvCq])
        assert.equal(cq.poll().length, 0, 'nothing else arrived');
    assert.deepEqual([...src.buffer.subarray(32, 56)], new Array(24).fill(9), 'the writes came back');
    await listener.close();
  } finally {
    await a.close();
    await b.close();
  }
}

test(
  'rdma: queue pairs share one verbs completion queue; completions reach the fabric CQ each was given',
  { skip },
  () => threeConnections(undefined, 1),
);

test(
  'rdma: a queue pair that does not fit the shared completion queue gets a second one',
  { skip },
  // 4096 entries hold two queue pairs of 1024 sends and 1024 receives: the third opens a second queue
  () => threeConnections(4096, 2),
);

test('rdma: a shared completion queue depth below 2 is refused', { skip }, () => {
  assert.throws(
    () => new RdmaDevice({ name: device as string, cqDepth: 1 }),
    (e: unknown) => isTandemError(e, 'INVALID_ARGUMENT') && /cqDepth/.test(e.message),
  );
});
