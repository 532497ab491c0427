import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chooseGid, RdmaContext } from '../../src/fabric/rdma-context.js';
import { RdmaQp } from '../../src/fabric/rdma-qp.js';
import { RdmaCq, RdmaPd, type RawCompletion } from '../../src/fabric/rdma-resources.js';
import { Access } from '../../src/fabric/types.js';

/**
 * The verbs layer on a real device: two queue pairs of one device connected to each other
 * (rxe delivers between them inside the kernel), every operation checked by its completion
 * and its bytes. Runs in the soft-RoCE guest (test/rdma/guest-job.sh sets TANDEM_RDMA_DEVICE);
 * skipped elsewhere.
 */
const device = process.env['TANDEM_RDMA_DEVICE'];
const skip = device === undefined ? 'needs an RDMA device (TANDEM_RDMA_DEVICE; npm run test:rdma)' : false;

async function next(cq: RdmaCq, wait = 5000): Promise<RawCompletion> {
  const end = Date.now() + wait;
  for (;;) {
    const [wc] = cq.poll(1);
    if (wc) return wc;
    if (Date.now() > end) throw new Error(`no completion within ${wait} ms`);
    await new Promise((r) => setImmediate(r));
  }
}

for (const type of ['rc', 'uc'] as const) {
  test(
    `rdma verbs ${type}: send/recv, write, write_imm${type === 'rc' ? ', read and a refused write' : ''}`,
    { skip },
    async () => {
      const ctx = RdmaContext.open(device);
      const gid = chooseGid(ctx.gids(), process.env['TANDEM_RDMA_IPV4']);
      assert.ok(gid, 'a GID');
      const pd = new RdmaPd(ctx);
      const cqA = new RdmaCq(ctx, 64);
      const cqB = new RdmaCq(ctx, 64);
      const caps = { maxSendWr: 16, maxRecvWr: 16, maxSge: 2, maxInline: 64 };
      const a = new RdmaQp(pd, type, cqA, cqA, caps);
      const b = new RdmaQp(pd, type, cqB, cqB, caps);
      const all = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ;
      a.connect(b.endpoint(gid.gid), gid.index, 7);
      b.connect(a.endpoint(gid.gid), gid.index, 7);
      const src = pd.register(
        new Uint8Array(4096).map((_, i) => i & 255),
        all,
      );
      const dst = pd.register(new Uint8Array(4096), all);
      try {
        b.postRecv({ wrId: 1, sgl: [dst.sge(0, 4096)] });
        a.postSend({ wrId: 2, opcode: 'send', sgl: [src.sge(0, 100)] });
        assert.deepEqual([(await next(cqA)).status, (await next(cqB)).byteLen], ['success', 100]);
        assert.equal(dst.buffer[99], 99);

        a.postSend({
          wrId: 3,
          opcode: 'write',
          sgl: [src.sge(200, 300)],
          remote: { addr: dst.addr + 1000n, rkey: dst.rkey },
        });
        assert.equal((await next(cqA)).status, 'success');
        assert.deepEqual([...dst.buffer.subarray(1000, 1003)], [200, 201, 202]);

        b.postRecv({ wrId: 4, sgl: [] });
        a.postSend({
          wrId: 5,
          opcode: 'write_imm',
          imm: 0xdeadbeef,
          sgl: [src.sge(0, 8)],
          remote: { addr: dst.addr, rkey: dst.rkey },
        });
        assert.equal((await next(cqA)).status, 'success');
        const imm = await next(cqB);
        assert.deepEqual([imm.status, imm.opcode, imm.imm], ['success', 'recv_imm', 0xdeadbeef]);

        a.postSend({
          wrId: 6,
          opcode: 'write',
          inline: true,
          sgl: [src.sge(10, 8)],
          remote: { addr: dst.addr + 3000n, rkey: dst.rkey },
        });
        assert.equal((await next(cqA)).status, 'success');
        assert.equal(dst.buffer[3000], 10);

        if (type === 'rc') {
          dst.buffer.fill(0x5a, 2000, 2100);
          a.postSend({
            wrId: 7,
            opcode: 'read',
            sgl: [src.sge(0, 100)],
            remote: { addr: dst.addr + 2000n, rkey: dst.rkey },
          });
          assert.equal((await next(cqA)).status, 'success');
          assert.equal(src.buffer[50], 0x5a);

          const ro = pd.register(new Uint8Array(64), Access.LOCAL_WRITE);
          a.postSend({
            wrId: 8,
            opcode: 'write',
            sgl: [src.sge(0, 8)],
            remote: { addr: ro.addr, rkey: ro.rkey },
          });
          const refused = await next(cqA);
          assert.equal(refused.status, 'remote_access', refused.verbsStatus);
          ro.deregister();
        } else {
          assert.throws(
            () =>
              a.postSend({
                wrId: 9,
                opcode: 'read',
                sgl: [src.sge(0, 8)],
                remote: { addr: dst.addr, rkey: dst.rkey },
              }),
            /UC/,
          );
        }
      } finally {
        a.close();
        b.close();
        src.deregister();
        dst.deregister();
        cqA.close();
        cqB.close();
        pd.close();
        ctx.close();
      }
    },
  );
}
