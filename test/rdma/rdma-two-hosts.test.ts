import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createCommunicator } from '../../src/collectives/index.js';
import {
  Access,
  openDevice,
  type CompletionQueue,
  type ProviderName,
  type WorkCompletion,
} from '../../src/fabric/index.js';

/**
 * The rdma provider between two hosts: two soft-RoCE guests joined by one Ethernet link
 * (test/rdma/run-two-guests.sh), each with an rxe device on its eth0. This file runs in both:
 * TANDEM_TWO_HOSTS names this side (a: 10.78.0.1, b: 10.78.0.2). Host a is the responder of an
 * RC connection, b the requester of a subset of the conformance suite's operations across the
 * link (a send with a scatter-gather list and its echo, a multi-packet write with immediate, a
 * read of it back, a write refused by the target region's rights); then both are the ranks of
 * a 2-rank all-reduce over rdma and over tcp, which must give the same bits.
 */
const side = process.env['TANDEM_TWO_HOSTS'];
const skip = side === undefined ? 'needs two soft-RoCE guests (test/rdma/run-two-guests.sh)' : false;
const ADDRESS = { a: '10.78.0.1', b: '10.78.0.2' } as const;
const VERBS_PORT = 7301;
const SECRET = 'rdma-two-hosts';
/** Software emulation on a shared machine: a peer may take minutes to start. */
const START_MS = 600_000;
const STEP_MS = 60_000;
const IMM = 0xc0ffee;

/** Deterministic bytes, the same on both hosts. */
function pattern(seed: number, length: number): Uint8Array {
  let s = seed >>> 0;
  return Uint8Array.from({ length }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s >>> 24;
  });
}
const SENT = pattern(1, 3000);
const WRITTEN = pattern(2, 40_000);

/** Completions by work request id, whatever order the queue reports them in. */
class Completions {
  private readonly got = new Map<number, WorkCompletion>();
  constructor(private readonly cq: CompletionQueue) {}

  async take(wrId: number, timeoutMs = STEP_MS): Promise<WorkCompletion> {
    const until = Date.now() + timeoutMs;
    while (!this.got.has(wrId)) {
      // wait() throws FABRIC_WAIT_TIMEOUT once the deadline passes
      for (const w of await this.cq.wait({ timeoutMs: Math.max(1, until - Date.now()) }))
        this.got.set(w.wrId, w);
    }
    const w = this.got.get(wrId) as WorkCompletion;
    this.got.delete(wrId);
    return w;
  }
}

/** Host a: registers a writable and readable region and a region without remote rights, answers. */
async function responder(): Promise<void> {
  const dev = await openDevice('rdma');
  try {
    const pd = dev.allocPd();
    const cq = dev.createCq();
    const target = pd.allocate(65_536, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ);
    const guarded = pd.allocate(4096, Access.LOCAL_WRITE);
    guarded.buffer.fill(0x5a);
    const rx = pd.allocate(8192, Access.LOCAL_WRITE);
    const tx = pd.allocate(8192, Access.NONE);
    const listener = await dev.listen({ host: ADDRESS.a, port: VERBS_PORT, secret: SECRET });
    const accepting = listener.accept({
      pd,
      cq,
      timeoutMs: START_MS,
      info: {
        addr: String(target.addr),
        rkey: target.rkey,
        guardedAddr: String(guarded.addr),
        guardedRkey: guarded.rkey,
      },
    });
    const qp = await accepting;
    await listener.close();
    const done = new Completions(cq);
    // two receives for the send and the write with immediate; a third that only an error completes
    qp.postRecv({ wrId: 1, sgl: [rx.sge(0, 4096)] });
    qp.postRecv({ wrId: 2, sgl: [rx.sge(4096, 64)] });
    qp.postRecv({ wrId: 3, sgl: [rx.sge(4160, 64)] });
    qp.postSend({ wrId: 10, opcode: 'send', sgl: [tx.sge(0, 4)] }); // ready: b posts its receives first
    assert.equal((await done.take(10)).status, 'success');

    const got = await done.take(1);
    assert.deepEqual([got.status, got.byteLen], ['success', SENT.length]);
    assert.deepEqual(rx.buffer.subarray(0, SENT.length), SENT, 'the send arrived intact');
    tx.buffer.set(rx.buffer.subarray(0, SENT.length));
    qp.postSend({ wrId: 11, opcode: 'send', sgl: [tx.sge(0, SENT.length)] });
    assert.equal((await done.take(11)).status, 'success');

    const imm = await done.take(2);
    assert.deepEqual([imm.status, imm.imm], ['success', IMM]);
    assert.deepEqual(
      target.buffer.subarray(4096, 4096 + WRITTEN.length),
      WRITTEN,
      'the write arrived intact',
    );
    qp.postSend({ wrId: 12, opcode: 'send', sgl: [tx.sge(0, 4)] });
    assert.equal((await done.take(12)).status, 'success');

    // b reads the region back, then writes to the guarded one: refused, the connection fails,
    // and the last receive completes with an error (flushed, or peer_lost once b closes).
    assert.notEqual((await done.take(3, START_MS)).status, 'success');
    assert.ok(
      guarded.buffer.every((x) => x === 0x5a),
      'the refused write left the guarded region untouched',
    );
  } finally {
    await dev.close();
  }
}

/** Host b: connects (retrying until a listens) and drives the operations. */
async function requester(): Promise<void> {
  const dev = await openDevice('rdma');
  try {
    const pd = dev.allocPd();
    const cq = dev.createCq();
    const src = pd.allocate(65_536, Access.LOCAL_WRITE);
    const rx = pd.allocate(8192, Access.LOCAL_WRITE);
    const until = Date.now() + START_MS;
    let qp;
    for (;;) {
      try {
        qp = await dev.connect({
          host: ADDRESS.a,
          port: VERBS_PORT,
          secret: SECRET,
          pd,
          cq,
          timeoutMs: STEP_MS,
        });
        break;
      } catch (e) {
        if (Date.now() > until) throw e;
        await new Promise((r) => setTimeout(r, 2000));
      }
    }
    const remote = (addr: string, rkey: unknown, offset: number) => ({
      addr: BigInt(String(qp.peerInfo[addr])) + BigInt(offset),
      rkey: Number(rkey),
    });
    const done = new Completions(cq);
    qp.postRecv({ wrId: 1, sgl: [rx.sge(0, 64)] });
    qp.postRecv({ wrId: 2, sgl: [rx.sge(64, 4096)] });
    qp.postRecv({ wrId: 3, sgl: [rx.sge(4160, 64)] });
    assert.equal((await done.take(1)).status, 'success', "a's ready");

    // a send gathered from two pieces of the source
    src.buffer.set(SENT.subarray(0, 1000), 0);
    src.buffer.set(SENT.subarray(1000), 8192);
    qp.postSend({ wrId: 20, opcode: 'send', sgl: [src.sge(0, 1000), src.sge(8192, SENT.length - 1000)] });
    assert.equal((await done.take(20)).status, 'success');
    assert.equal((await done.take(2)).status, 'success');
    assert.deepEqual(rx.buffer.subarray(64, 64 + SENT.length), SENT, "a's echo arrived intact");

    // a write with immediate of 40 000 B (40 packets at MTU 1024), then read back
    src.buffer.set(WRITTEN, 16_384);
    const target = remote('addr', qp.peerInfo['rkey'], 4096);
    qp.postSend({
      wrId: 21,
      opcode: 'write_imm',
      sgl: [src.sge(16_384, WRITTEN.length)],
      remote: target,
      imm: IMM,
    });
    const wrote = await cq.wait({ min: 2, timeoutMs: STEP_MS });
    assert.deepEqual(
      wrote.map((w) => w.status),
      ['success', 'success'],
    );
    const back = pd.allocate(WRITTEN.length, Access.LOCAL_WRITE);
    qp.postSend({ wrId: 22, opcode: 'read', sgl: [back.sge()], remote: target });
    assert.equal((await done.take(22)).status, 'success');
    assert.deepEqual(back.buffer, WRITTEN, 'the read returned what was written');

    // a write to a region without REMOTE_WRITE: refused by a's device
    const guarded = remote('guardedAddr', qp.peerInfo['guardedRkey'], 0);
    qp.postSend({ wrId: 23, opcode: 'write', sgl: [src.sge(0, 64)], remote: guarded });
    assert.equal((await done.take(23)).status, 'remote_access');
  } finally {
    await dev.close();
  }
}

test(
  'rdma rc between two hosts: send with an SGL, write_imm, read, a refused write',
  { skip, timeout: 2 * START_MS },
  () => (side === 'a' ? responder() : requester()),
);

/** Deterministic non-integer values, so that a different summation order would show. */
function vector(rank: number, length: number): Float32Array {
  let s = 0x9e3779b9 ^ (rank * 7919 + length);
  return Float32Array.from({ length }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32 - 0.5;
  });
}

async function reduceAcross(
  provider: ProviderName,
  port: number,
  lengths: readonly number[],
): Promise<Uint8Array[]> {
  const rank = side === 'a' ? 0 : 1;
  const c = await createCommunicator({
    rank,
    size: 2,
    provider,
    secret: SECRET,
    rendezvous: { kind: 'hosts', addresses: [`${ADDRESS.a}:${port}`, `${ADDRESS.b}:${port}`] },
    timeoutMs: STEP_MS * 2,
    connectTimeoutMs: START_MS,
  });
  try {
    const out: Uint8Array[] = [];
    for (const n of lengths) {
      const x = vector(rank, n);
      await c.allReduce(x);
      out.push(new Uint8Array(x.buffer));
    }
    return out;
  } finally {
    await c.close();
  }
}

test(
  'rdma: a 2-rank all-reduce between two hosts gives the same bits as over tcp',
  { skip, timeout: 3 * START_MS },
  async () => {
    const lengths = [8, 4096, 1 << 18];
    const rdma = await reduceAcross('rdma', 7302, lengths);
    const tcp = await reduceAcross('tcp', 7303, lengths);
    lengths.forEach((n, i) => assert.deepEqual(rdma[i], tcp[i], `${n} elements`));
    // the sum of both ranks' vectors, so each host checks what the other contributed too
    const expected = vector(0, 8).map((v, i) => v + (vector(1, 8)[i] as number));
    assert.deepEqual(new Float32Array((rdma[0] as Uint8Array).buffer, 0, 8), expected);
  },
);
