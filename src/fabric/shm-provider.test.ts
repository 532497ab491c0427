import { test } from 'node:test';
import assert from 'node:assert/strict';
import { conformance } from './conformance.cases.js';
import { Access, expectSuccess, openDevice } from './index.js';
import type { ShmDevice } from './shm-provider.js';

conformance('shm');

test(
  'shm: an idle device stops polling; a wait asleep on the doorbell is woken by the peer',
  { timeout: 20_000 },
  async () => {
    const [da, db] = [(await openDevice('shm')) as ShmDevice, (await openDevice('shm')) as ShmDevice];
    try {
      const mk = (d: ShmDevice) => {
        const pd = d.allocPd();
        return { pd, cq: d.createCq(), mr: pd.allocate(4096, Access.LOCAL_WRITE | Access.REMOTE_WRITE) };
      };
      const [a, b] = [mk(da), mk(db)];
      const l = await da.listen({ port: 0, secret: 's' });
      const [qa, qb] = await Promise.all([
        l.accept({ pd: a.pd, cq: a.cq }),
        db.connect({ host: '127.0.0.1', port: l.port, secret: 's', pd: b.pd, cq: b.cq }),
      ]);
      const until = async (what: string, ok: () => boolean): Promise<void> => {
        for (let i = 0; !ok(); i++) {
          if (i > 500) assert.fail(`${what} within 5 s`);
          await new Promise((r) => setTimeout(r, 10));
        }
      };
      // nobody polls or waits: the 1 ms tick stops and the doorbell is armed
      await until('device A idle', () => !da.doorbellState().ticking && da.doorbellState().armed);
      const knocks = da.doorbellState().knocksReceived;
      qa.postRecv({ wrId: 7, sgl: [] });
      // A waits long enough to fall asleep (the event loop stays free: the timer below fires)
      const waiting = a.cq.wait({ timeoutMs: 10_000 });
      await new Promise((r) => setTimeout(r, 30));
      b.mr.buffer.fill(9, 0, 16);
      qb.postSend({ wrId: 1, opcode: 'write_imm', imm: 42, sgl: [b.mr.sge(0, 16)], remote: a.mr.remote(0) });
      const [wc] = expectSuccess(await waiting);
      assert.deepEqual([wc?.wrId, wc?.opcode, wc?.imm], [7, 'recv_imm', 42]);
      assert.deepEqual([...a.mr.buffer.subarray(0, 16)], new Array(16).fill(9));
      assert.ok(da.doorbellState().knocksReceived > knocks, 'the peer knocked');
      expectSuccess(await b.cq.wait({ timeoutMs: 5000 }));
      await l.close();
    } finally {
      await da.close();
      await db.close();
    }
  },
);
