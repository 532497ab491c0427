import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { chooseGid, RdmaContext } from '../../src/fabric/rdma-context.js';
import { RdmaQp } from '../../src/fabric/rdma-qp.js';
import { RdmaCq, RdmaPd, type RawCompletion } from '../../src/fabric/rdma-resources.js';
import { Access } from '../../src/fabric/types.js';

/**
 * A peer process killed (SIGKILL) under an RC connection: the survivor's next write fails
 * with peer_lost (verbs: retry count exceeded) within 2 s, and later requests are flushed.
 * Runs in the soft-RoCE guest (TANDEM_RDMA_DEVICE); skipped elsewhere.
 */
const device = process.env['TANDEM_RDMA_DEVICE'];
const skip = device === undefined ? 'needs an RDMA device (TANDEM_RDMA_DEVICE; npm run test:rdma)' : false;
// Known to fail: with the peer killed, rxe's loopback gives the survivor's write no completion
// at all, so verbs alone misses the bound; the rdma provider learns the loss from the side
// channel and moves its queue pairs to ERR (rdma-peer-loss.test.ts). Reported, not counted.
const todo =
  'verbs alone gets no completion for a dead peer on rxe; the provider learns it from the side channel (rdma-peer-loss.test.ts)';

async function next(cq: RdmaCq, waitMs: number): Promise<RawCompletion> {
  const end = Date.now() + waitMs;
  for (;;) {
    const [wc] = cq.poll(1);
    if (wc) return wc;
    if (Date.now() > end) throw new Error(`no completion within ${waitMs} ms`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

test(
  'rdma verbs rc: a killed peer is peer_lost on the survivor within 2 s',
  { skip, todo, timeout: 240_000 },
  async () => {
    const ctx = RdmaContext.open(device);
    const gid = chooseGid(ctx.gids(), process.env['TANDEM_RDMA_IPV4']);
    assert.ok(gid);
    const pd = new RdmaPd(ctx);
    const cq = new RdmaCq(ctx, 16);
    const qp = new RdmaQp(pd, 'rc', cq, cq, { maxSendWr: 4, maxRecvWr: 4, maxSge: 1, maxInline: 0 });
    const mr = pd.register(new Uint8Array(4096).fill(7), Access.LOCAL_WRITE);
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/rdma/verbs-peer.ts'], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    const killer = setTimeout(() => child.kill('SIGKILL'), 200_000);
    try {
      const lines = createInterface({ input: child.stdout });
      const it = lines[Symbol.asyncIterator]();
      const first = (await it.next()).value as string;
      const peer = JSON.parse(first) as {
        qpNum: number;
        psn: number;
        gid: string;
        mtu: number;
        addr: string;
        rkey: number;
      };
      qp.connect({ ...peer, gid: new Uint8Array(Buffer.from(peer.gid, 'hex')) }, gid.index, 7);
      const ep = qp.endpoint(gid.gid);
      child.stdin.write(JSON.stringify({ ...ep, gid: Buffer.from(ep.gid).toString('hex') }) + '\n');
      assert.equal((await it.next()).value, 'ready');
      const remote = { addr: BigInt(peer.addr), rkey: peer.rkey };
      qp.postSend({ wrId: 1, opcode: 'write', sgl: [mr.sge(0, 64)], remote });
      assert.equal((await next(cq, 10_000)).status, 'success');

      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await exited;
      const t0 = Date.now();
      qp.postSend({ wrId: 2, opcode: 'write', sgl: [mr.sge(0, 64)], remote });
      qp.postSend({ wrId: 3, opcode: 'write', sgl: [mr.sge(0, 64)], remote });
      // Waits well past the 2 s goal so that a late completion is seen and reported.
      const lost = await next(cq, 30_000);
      const ms = Date.now() - t0;
      console.log(`# after the peer's death: ${lost.verbsStatus} in ${ms} ms`);
      assert.equal(lost.status, 'peer_lost', lost.verbsStatus);
      assert.ok(ms < 2000, `peer_lost after ${ms} ms`);
      assert.equal((await next(cq, 2_000)).status, 'flushed');
    } finally {
      clearTimeout(killer);
      child.kill('SIGKILL');
      qp.close();
      mr.deregister();
      cq.close();
      pd.close();
      ctx.close();
    }
  },
);
