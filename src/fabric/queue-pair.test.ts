import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../errors/index.js';
import { completionError, openDevice } from './index.js';
import type { Qp } from './queue-pair.js';
import { Access, type CompletionQueue, type ProviderName, type WorkCompletion } from './types.js';
import { putU32 } from './wire.js';

const SECRET = 'queue-pair-secret';
const ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ;

async function pair(provider: ProviderName) {
  const da = await openDevice(provider);
  const db = await openDevice(provider);
  const pa = da.allocPd();
  const pb = db.allocPd();
  const ca = da.createCq();
  const cb = db.createCq();
  const l = await db.listen({ host: '127.0.0.1', port: 0, secret: SECRET });
  const [qb, qa] = await Promise.all([
    l.accept({ pd: pb, cq: cb, timeoutMs: 5000 }),
    da.connect({ host: '127.0.0.1', port: l.port, secret: SECRET, pd: pa, cq: ca, timeoutMs: 5000 }),
  ]);
  await l.close();
  return {
    a: { pd: pa, cq: ca, qp: qa as Qp },
    b: { pd: pb, cq: cb, qp: qb as Qp },
    close: async () => {
      await da.close();
      await db.close();
    },
  };
}

async function one(cq: CompletionQueue): Promise<WorkCompletion> {
  const [wc] = await cq.wait({ timeoutMs: 5000, max: 1 });
  return wc as WorkCompletion;
}

/** The error a user sees for `wc`: its message and its details' reason. */
function seen(wc: WorkCompletion): { message: string; reason: unknown } {
  const e = completionError(wc);
  assert.ok(isTandemError(e, 'FABRIC_WORK_FAILED'), e.message);
  return { message: e.message, reason: e.details.reason };
}

for (const provider of ['loopback', 'tcp'] as const) {
  test(`${provider}: a refusal's reason reaches the error of the refused request and of every later one`, async () => {
    const { a, b, close } = await pair(provider);
    try {
      const local = a.pd.allocate(64, ALL);
      const target = b.pd.allocate(64, ALL);
      const forged = { addr: target.addr, rkey: (target.rkey ^ 0x5a5a5a5a) >>> 0 || 1 };
      a.qp.postSend({ wrId: 1, opcode: 'write', sgl: [local.sge()], remote: forged });
      const refused = await one(a.cq);
      assert.equal(refused.status, 'remote_key');
      const why = 'peer refused work request 1: remote_key';
      assert.equal(a.qp.errorReason, why);
      assert.deepEqual(seen(refused), { message: completionError(refused).message, reason: why });
      assert.match(
        seen(refused).message,
        /work request 1 .* completed with remote_key \(peer refused work request 1: remote_key\)/,
      );
      a.qp.postSend({ wrId: 2, opcode: 'write', sgl: [local.sge()], remote: target.remote() });
      const flushed = await one(a.cq);
      assert.equal(flushed.status, 'flushed');
      assert.equal(seen(flushed).reason, why);
      assert.ok(seen(flushed).message.endsWith(`(${why})`), seen(flushed).message);
    } finally {
      await close();
    }
  });

  test(`${provider}: a malformed frame's reason reaches the responder's flushed receives`, async () => {
    const { a, b, close } = await pair(provider);
    try {
      const dst = b.pd.allocate(64, ALL);
      b.qp.postRecv({ wrId: 6, sgl: [dst.sge()] });
      const unknown = new Uint8Array(4 + 8);
      putU32(unknown, 0, 8);
      unknown[4] = 99; // an unknown type, in sequence
      putU32(unknown, 8, (a.qp as unknown as { sendPsn: number }).sendPsn);
      a.qp.sendRaw(unknown);
      const lost = await one(b.cq);
      assert.deepEqual([lost.wrId, lost.status], [6, 'peer_lost']);
      assert.equal(seen(lost).reason, 'malformed frame from peer: unknown frame type 99');
      assert.match(
        seen(lost).message,
        /recv work request 6 .* completed with peer_lost \(malformed frame from peer: unknown frame type 99\)/,
      );
    } finally {
      await close();
    }
  });
}

test('a completion that no queue pair failed carries no reason', async () => {
  const { a, close } = await pair('loopback');
  try {
    a.qp.postRecv({ wrId: 1, sgl: [a.pd.allocate(64, Access.NONE).sge()] });
    const wc = await one(a.cq);
    assert.equal(wc.status, 'local_protection');
    const e = completionError(wc);
    assert.equal(e.details.reason, undefined);
    assert.ok(e.message.endsWith('completed with local_protection'), e.message);
    assert.equal(a.qp.errorReason, '');
  } finally {
    await close();
  }
});
