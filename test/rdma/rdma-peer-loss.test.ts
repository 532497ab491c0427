import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { isTandemError } from '../../src/errors/index.js';
import { Access, completionError, openDevice, type WorkCompletion } from '../../src/fabric/index.js';

/**
 * A peer process killed (SIGKILL) under an RC connection of the rdma provider: the survivor's
 * writes posted after the death complete with peer_lost within 2 s, and their typed error is
 * the fabric's peer error. rxe gives no completion at all for a dead peer on one device
 * (docs/fabric.md), so this is the side channel's doing: its TCP connection ends with the peer
 * process, and the provider moves the queue pair to ERR. Runs in the soft-RoCE guest.
 */
const device = process.env['TANDEM_RDMA_DEVICE'];
const skip = device === undefined ? 'needs an RDMA device (TANDEM_RDMA_DEVICE; npm run test:rdma)' : false;

test(
  'rdma rc: a killed peer is peer_lost on the survivor within 2 s',
  { skip, timeout: 300_000 },
  async () => {
    const dev = await openDevice('rdma');
    const listener = await dev.listen({ host: '127.0.0.1', port: 0, secret: 'peer-loss' });
    const peer = spawn(
      process.execPath,
      ['--import', 'tsx', 'test/rdma/rdma-peer.ts', String(listener.port)],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    const killer = setTimeout(() => peer.kill('SIGKILL'), 250_000);
    try {
      const pd = dev.allocPd();
      const cq = dev.createCq();
      const mr = pd.allocate(4096, Access.LOCAL_WRITE);
      // a peer process under software emulation takes up to a minute to start
      const qp = await listener.accept({ pd, cq, timeoutMs: 200_000 });
      const lines = createInterface({ input: peer.stdout });
      assert.equal((await lines[Symbol.asyncIterator]().next()).value, 'ready');
      const remote = { addr: BigInt(String(qp.peerInfo.addr)), rkey: Number(qp.peerInfo.rkey) };
      qp.postSend({ wrId: 1, opcode: 'write', sgl: [mr.sge(0, 64)], remote });
      assert.equal((await cq.wait({ timeoutMs: 20_000 }))[0]?.status, 'success');

      const exited = new Promise((r) => peer.once('exit', r));
      peer.kill('SIGKILL');
      await exited;
      const t0 = Date.now();
      qp.postSend({ wrId: 2, opcode: 'write', sgl: [mr.sge(0, 64)], remote });
      qp.postSend({ wrId: 3, opcode: 'write', sgl: [mr.sge(0, 64)], remote });
      const got: WorkCompletion[] = [];
      while (got.length < 2) got.push(...(await cq.wait({ timeoutMs: 10_000 })));
      const ms = Date.now() - t0;
      console.log(`# after the peer's death: ${got.map((w) => w.status).join(', ')} in ${ms} ms`);
      assert.deepEqual(
        got.map((w) => [w.wrId, w.status]),
        [
          [2, 'peer_lost'],
          [3, 'peer_lost'],
        ],
      );
      assert.ok(ms < 2000, `peer_lost after ${ms} ms`);
      assert.ok(isTandemError(completionError(got[0] as WorkCompletion), 'FABRIC_WORK_FAILED'));
      assert.equal(qp.state, 'error');
      await listener.close();
    } finally {
      clearTimeout(killer);
      peer.kill('SIGKILL');
      await dev.close();
    }
  },
);
