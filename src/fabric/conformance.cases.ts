import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { isTandemError } from '../errors/index.js';
import { openDevice } from './index.js';
import {
  Access,
  type CompletionQueue,
  type Device,
  type MemoryRegion,
  type ProtectionDomain,
  type ProviderName,
  type QueuePair,
  type WorkCompletion,
  MAX_INLINE,
} from './types.js';
import { putU32 } from './wire.js';

/**
 * The conformance suite every provider passes. Each case builds a fresh connected pair
 * (requester a, responder b, on two devices so their counters are separate).
 */
export interface End {
  dev: Device;
  pd: ProtectionDomain;
  cq: CompletionQueue;
  qp: QueuePair;
}

const SECRET = 'conformance-secret';
const ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ;
const T = { timeoutMs: 5000 };

/**
 * How a provider differs from the software ones, where the difference is the hardware's:
 * - open: opens one device (default openDevice(provider)); label names the variant in titles;
 * - verbs: a NIC is the responder (the rdma provider). It refuses a bad key, missing rights
 *   and a range outside the region alike (verbs' REM_ACCESS_ERR: remote_access) and keeps no
 *   counters of ours; there are no software frames, ACKs or receive arrays to look at; it
 *   assigns keys itself; an RC send waits (receiver-not-ready retries) for its receive instead
 *   of being kept unexpected. `reads`: the queue pair offers RDMA READ (RC). `refusals`: the
 *   requester learns of a refusal (RC; a UC responder drops a refused write silently);
 * - timeoutScale: test deadlines times this (a device under software emulation).
 */
export interface ConformanceProfile {
  open?: () => Promise<Device>;
  label?: string;
  verbs?: { reads: boolean; refusals: boolean };
  timeoutScale?: number;
}

type Open = () => Promise<Device>;

async function pair(open: Open): Promise<{ a: End; b: End; close(): Promise<void> }> {
  const da = await open();
  const db = await open();
  const pa = da.allocPd();
  const pb = db.allocPd();
  const ca = da.createCq();
  const cb = db.createCq();
  const l = await db.listen({ host: '127.0.0.1', port: 0, secret: SECRET });
  const [qb, qa] = await Promise.all([
    l.accept({ pd: pb, cq: cb, info: { side: 'b' }, timeoutMs: 5000 }),
    da.connect({
      host: '127.0.0.1',
      port: l.port,
      secret: SECRET,
      pd: pa,
      cq: ca,
      info: { side: 'a' },
      timeoutMs: 5000,
    }),
  ]);
  await l.close();
  return {
    a: { dev: da, pd: pa, cq: ca, qp: qa },
    b: { dev: db, pd: pb, cq: cb, qp: qb },
    close: async () => {
      await da.close();
      await db.close();
    },
  };
}

const hash = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

function fill(mr: MemoryRegion, seed: number): void {
  for (let i = 0; i < mr.length; i++) mr.buffer[i] = (i * 31 + seed) & 0xff;
}

async function one(cq: CompletionQueue): Promise<WorkCompletion> {
  const [wc] = await cq.wait({ ...T, max: 1 });
  return wc as WorkCompletion;
}

/** Posts a one-sided request from a to b and expects `status`, b's region unchanged, b counting it. */
async function refused(
  open: Open,
  build: (
    a: End,
    b: End,
    target: MemoryRegion,
    other: MemoryRegion,
  ) => { op: 'write' | 'read'; addr: bigint; rkey: number; length?: number },
  status: WorkCompletion['status'],
  counter: 'rejectedKey' | 'rejectedAccess' | 'rejectedBounds' | undefined,
  targetAccess = ALL,
): Promise<void> {
  const { a, b, close } = await pair(open);
  try {
    const target = b.pd.allocate(8192, targetAccess);
    fill(target, 7);
    const before = hash(target.buffer);
    const otherPd = b.dev.allocPd();
    const other = otherPd.allocate(4096, ALL);
    const local = a.pd.allocate(256 * 1024, ALL);
    const req = build(a, b, target, other);
    const len = req.length ?? 64;
    a.qp.postSend({
      wrId: 1,
      opcode: req.op,
      sgl: [local.sge(0, len)],
      remote: { addr: req.addr, rkey: req.rkey },
    });
    const wc = await one(a.cq);
    assert.equal(wc.status, status, `expected ${status}, got ${wc.status}`);
    assert.equal(wc.wrId, 1);
    assert.equal(hash(target.buffer), before, 'the target region must be untouched');
    if (counter !== undefined) assert.ok(b.dev.stats()[counter] >= 1, `responder counts ${counter}`);
    // later work on the failed queue pair is flushed, never success
    a.qp.postSend({ wrId: 2, opcode: 'write', sgl: [local.sge(0, 8)], remote: target.remote() });
    assert.notEqual((await one(a.cq)).status, 'success');
  } finally {
    await close();
  }
}

export function conformance(provider: ProviderName, profile: ConformanceProfile = {}): void {
  const label = profile.label ?? provider;
  const name = (s: string): string => `${label}: ${s}`;
  const open: Open = profile.open ?? (() => openDevice(provider));
  const verbs = profile.verbs;
  const scale = profile.timeoutScale ?? 1;
  const ms = (t: number): { timeout: number } => ({ timeout: t * scale });
  const notOnVerbs = (why: string): { skip: string | false } => ({ skip: verbs ? `verbs: ${why}` : false });
  /** The status a refusal reports, and the responder's counter of it (none on a NIC). */
  const refusal = (
    status: WorkCompletion['status'],
    counter: 'rejectedKey' | 'rejectedAccess' | 'rejectedBounds',
  ): [WorkCompletion['status'], typeof counter | undefined] =>
    verbs ? ['remote_access', undefined] : [status, counter];
  const refusals = {
    skip:
      verbs && !verbs.refusals
        ? 'verbs UC: the responder drops a refused write; the requester never hears'
        : false,
  };

  test(name('send/recv with scatter-gather lists, in order'), ms(30_000), async () => {
    const { a, b, close } = await pair(open);
    try {
      assert.equal(a.qp.peerInfo.side, 'b');
      assert.equal(b.qp.peerInfo.side, 'a');
      const src = a.pd.allocate(4096, Access.NONE);
      const dst = b.pd.allocate(4096, Access.LOCAL_WRITE);
      fill(src, 1);
      for (let i = 0; i < 100; i++) b.qp.postRecv({ wrId: 1000 + i, sgl: [dst.sge(0, 3), dst.sge(100, 5)] });
      for (let i = 0; i < 100; i++)
        a.qp.postSend({ wrId: i, opcode: 'send', sgl: [src.sge(i, 2), src.sge(2000, 6)] });
      const sent = await a.cq.wait({ ...T, min: 100 });
      const recvd = await b.cq.wait({ ...T, min: 100 });
      assert.deepEqual(
        sent.map((w) => w.wrId),
        [...Array(100).keys()],
      );
      assert.ok(sent.every((w) => w.status === 'success' && w.opcode === 'send' && w.byteLen === 8));
      assert.deepEqual(
        recvd.map((w) => w.wrId),
        [...Array(100).keys()].map((i) => 1000 + i),
      );
      assert.ok(recvd.every((w) => w.status === 'success' && w.opcode === 'recv' && w.byteLen === 8));
      // last message: src[99..100] ++ src[2000..2005] scattered as 3 + 5 bytes
      const want = [...src.buffer.subarray(99, 101), ...src.buffer.subarray(2000, 2006)];
      assert.deepEqual([...dst.buffer.subarray(0, 3), ...dst.buffer.subarray(100, 105)], want);
    } finally {
      await close();
    }
  });

  test(
    name('a receiver that always keeps receives posted holds a bounded queue'),
    { ...ms(60_000), ...notOnVerbs('the device holds the posted receives (max_recv_wr bounds them)') },
    async () => {
      const { a, b, close } = await pair(open);
      try {
        const src = a.pd.allocate(64, Access.NONE);
        const dst = b.pd.allocate(64, Access.LOCAL_WRITE);
        const DEPTH = 8;
        const N = 3000;
        for (let i = 0; i < DEPTH; i++) b.qp.postRecv({ wrId: i, sgl: [dst.sge(0, 8)] });
        // the queue's private array of posted receives: it must not keep every receive ever posted
        const posted = (): number => {
          const recvs = (b.qp as unknown as { recvs?: unknown }).recvs;
          assert.ok(Array.isArray(recvs), 'the queue pair keeps its posted receives in `recvs`');
          return recvs.length;
        };
        let most = 0;
        for (let i = 0; i < N; i++) {
          a.qp.postSend({ wrId: i, opcode: 'send', sgl: [src.sge(0, 8)], signaled: false });
          const wc = await one(b.cq);
          assert.deepEqual([wc.wrId, wc.status], [i, 'success']);
          b.qp.postRecv({ wrId: i + DEPTH, sgl: [dst.sge(0, 8)] });
          most = Math.max(most, posted());
        }
        assert.ok(
          most <= 2 * 1024 + DEPTH,
          `posted-receive array grew to ${most} entries over ${N} messages`,
        );
      } finally {
        await close();
      }
    },
  );

  test(
    name('unsignaled requests are acknowledged in batches, signaled ones at once, the rest within a tick'),
    { ...ms(30_000), ...notOnVerbs('the NIC acknowledges; there are no software ACKs to count') },
    async () => {
      const { a, b, close } = await pair(open);
      try {
        const src = a.pd.allocate(64, Access.NONE);
        fill(src, 5);
        const dst = b.pd.allocate(64 * 64, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
        const back = a.pd.allocate(64, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
        const acks = (): number => b.dev.stats().acksSent + a.dev.stats().acksSent;
        const before = acks();
        // a ping-pong of unsignaled writes with immediate: each end handles one request per poll
        for (let i = 0; i < 64; i++) {
          b.qp.postRecv({ wrId: i, sgl: [] });
          a.qp.postRecv({ wrId: i, sgl: [] });
          a.qp.postSend({
            wrId: i,
            opcode: 'write_imm',
            imm: i,
            sgl: [src.sge(0, 8)],
            remote: dst.remote(8 * i),
            signaled: false,
          });
          assert.equal((await one(b.cq)).imm, i);
          b.qp.postSend({
            wrId: i,
            opcode: 'write_imm',
            imm: i,
            sgl: [dst.sge(8 * i, 8)],
            remote: back.remote(0),
            signaled: false,
          });
          assert.equal((await one(a.cq)).imm, i);
        }
        for (let i = 0; i < 64; i++)
          assert.deepEqual(dst.buffer.subarray(8 * i, 8 * i + 8), src.buffer.subarray(0, 8));
        const batched = acks() - before;
        // one ACK per 16 unasked frames each way, rather than one per request
        assert.ok(batched <= 2 * (64 / 16 + 1), `${batched} ACKs for 128 writes`);
        // a signaled write completes on its asked-for ACK, well before a timeout tick would send it
        b.qp.postRecv({ wrId: 99, sgl: [] });
        a.qp.postSend({
          wrId: 64,
          opcode: 'write_imm',
          imm: 7,
          sgl: [src.sge(0, 8)],
          remote: dst.remote(512),
        });
        const wc = await one(a.cq);
        assert.deepEqual([wc.wrId, wc.status], [64, 'success']);
        assert.equal((await one(b.cq)).imm, 7);
        // unsignaled requests with nothing after them: the responder's timer acknowledges them
        // (writes with immediate: a plain small write may go with no frame, see below)
        const quiet = b.dev.stats().acksSent;
        for (let i = 0; i < 3; i++) b.qp.postRecv({ wrId: 200 + i, sgl: [] });
        for (let i = 0; i < 3; i++)
          a.qp.postSend({
            wrId: 100 + i,
            opcode: 'write_imm',
            imm: i,
            sgl: [src.sge(0, 8)],
            remote: dst.remote(8 * i),
            signaled: false,
          });
        const deadline = Date.now() + 5000;
        while (b.dev.stats().acksSent === quiet && Date.now() < deadline) {
          b.cq.poll(); // drives progress on providers that poll
          await new Promise((r) => setTimeout(r, 5));
        }
        assert.equal(
          b.dev.stats().acksSent,
          quiet + 1,
          'the three writes were acknowledged by the timer, once',
        );
        // and the requester holds nothing for them any more
        const outstanding = (): number => {
          const q = a.qp as unknown as { outstanding?: unknown[]; outHead?: number };
          assert.ok(
            Array.isArray(q.outstanding),
            'the requester keeps its unacknowledged frames in `outstanding`',
          );
          return q.outstanding.length - (q.outHead ?? 0);
        };
        while (outstanding() > 0 && Date.now() < deadline) {
          a.cq.poll();
          await new Promise((r) => setTimeout(r, 5));
        }
        assert.equal(outstanding(), 0);
      } finally {
        await close();
      }
    },
  );

  if (provider !== 'loopback')
    test(
      name(
        'an asked-for ACK leaves with the poll that received its request (the responder may not poll again)',
      ),
      ms(30_000),
      async () => {
        const { a, b, close } = await pair(open);
        try {
          const src = a.pd.allocate(64, Access.NONE);
          const dst = b.pd.allocate(64, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
          b.qp.postRecv({ wrId: 1, sgl: [] });
          a.qp.postSend({
            wrId: 2,
            opcode: 'write_imm',
            imm: 3,
            sgl: [src.sge(0, 8)],
            remote: dst.remote(0),
          });
          // b handles the request in one poll, then computes (no poll, no event-loop turn)
          let got: readonly WorkCompletion[] = [];
          const until = Date.now() + 5000;
          while (got.length === 0 && Date.now() < until) {
            got = b.cq.poll(1);
            if (got.length === 0) await new Promise((r) => setImmediate(r));
          }
          assert.equal(got[0]?.imm, 3, 'b received the write');
          let sent: readonly WorkCompletion[] = [];
          // polled pipes (shm, tcp through koffi) are read by poll() itself: spin with no
          // event-loop turn at all; event-driven ones (loopback, node:net) deliver from it
          const transport = (a.qp as unknown as { transport?: { poll?: unknown } }).transport;
          if (typeof transport?.poll === 'function') {
            const spinUntil = Date.now() + 2000;
            while (sent.length === 0 && Date.now() < spinUntil) sent = a.cq.poll(1);
          } else {
            sent = await a.cq.wait({ timeoutMs: 2000, max: 1 });
          }
          assert.deepEqual(
            [sent[0]?.wrId, sent[0]?.status],
            [2, 'success'],
            'the requester completed while the responder did nothing more',
          );
        } finally {
          await close();
        }
      },
    );

  test(
    name(
      'an inline write may reuse its buffer at once, even behind a full pipe; inline limits are typed errors',
    ),
    ms(60_000),
    async () => {
      const { a, b, close } = await pair(open);
      try {
        // fill the pipe first (shm: 4 x 5 MiB of sends do not fit its 16 MiB ring unread)
        const big = a.pd.allocate(5 << 20, Access.NONE);
        const sink = b.pd.allocate(5 << 20, Access.LOCAL_WRITE);
        for (let i = 0; i < 4; i++) b.qp.postRecv({ wrId: 10 + i, sgl: [sink.sge()] });
        for (let i = 0; i < 4; i++)
          a.qp.postSend({ wrId: 10 + i, opcode: 'send', sgl: [big.sge()], signaled: false });
        const src = a.pd.allocate(MAX_INLINE, Access.NONE);
        const dst = b.pd.allocate(MAX_INLINE, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
        src.buffer.fill(0x5a);
        a.qp.postSend({ wrId: 1, opcode: 'write', sgl: [src.sge()], remote: dst.remote(0), inline: true });
        src.buffer.fill(0xa5); // reused before the peer could have read anything
        assert.equal((await one(a.cq)).wrId, 1);
        for (let i = 0; i < 4; i++) assert.equal((await one(b.cq)).status, 'success');
        assert.ok(
          dst.buffer.every((x) => x === 0x5a),
          'the peer got the bytes as they were when posted',
        );
        const refusedPost = (wr: Parameters<QueuePair['postSend']>[0]): void =>
          assert.throws(
            () => a.qp.postSend(wr),
            (e: unknown) => isTandemError(e) && e.code === 'FABRIC_INVALID_REQUEST',
          );
        const over = a.pd.allocate(MAX_INLINE + 1, Access.NONE);
        refusedPost({ wrId: 2, opcode: 'write', sgl: [over.sge()], remote: dst.remote(0), inline: true });
        refusedPost({ wrId: 3, opcode: 'read', sgl: [over.sge(0, 8)], remote: dst.remote(0), inline: true });
      } finally {
        await close();
      }
    },
  );

  test(
    name('a send that arrives before its receive is kept; too long a message is local_length'),
    {
      ...ms(30_000),
      ...notOnVerbs(
        'no unexpected-message queue: an RC send waits for its receive (RNR retries), a UC one is dropped',
      ),
    },
    async () => {
      const { a, b, close } = await pair(open);
      try {
        const src = a.pd.allocate(256, Access.NONE);
        const dst = b.pd.allocate(256, Access.LOCAL_WRITE);
        fill(src, 3);
        a.qp.postSend({ wrId: 1, opcode: 'send', sgl: [src.sge(0, 32)] });
        assert.equal((await one(a.cq)).status, 'success');
        b.qp.postRecv({ wrId: 2, sgl: [dst.sge(0, 64)] });
        const wc = await one(b.cq);
        assert.deepEqual([wc.wrId, wc.status, wc.byteLen], [2, 'success', 32]);
        assert.deepEqual(dst.buffer.subarray(0, 32), src.buffer.subarray(0, 32));
        b.qp.postRecv({ wrId: 3, sgl: [dst.sge(0, 8)] });
        a.qp.postSend({ wrId: 4, opcode: 'send', sgl: [src.sge(0, 100)] });
        assert.equal((await one(b.cq)).status, 'local_length');
        assert.equal((await one(a.cq)).status, 'remote_invalid');
      } finally {
        await close();
      }
    },
  );

  test(name('write, write_imm and read, including multi-frame sizes'), ms(30_000), async () => {
    const { a, b, close } = await pair(open);
    try {
      const big = 9 * 1024 * 1024 + 13;
      const la = a.pd.allocate(big, Access.LOCAL_WRITE);
      const rb = b.pd.allocate(big + 100, Access.REMOTE_WRITE | Access.REMOTE_READ | Access.LOCAL_WRITE);
      fill(la, 5);
      a.qp.postSend({ wrId: 1, opcode: 'write', sgl: [la.sge(0, big)], remote: rb.remote(100) });
      const w = await one(a.cq);
      assert.deepEqual([w.status, w.opcode, w.byteLen], ['success', 'write', big]);
      assert.equal(hash(rb.buffer.subarray(100)), hash(la.buffer));
      b.qp.postRecv({ wrId: 7, sgl: [] });
      a.qp.postSend({
        wrId: 2,
        opcode: 'write_imm',
        imm: 0xdeadbeef,
        sgl: [la.sge(0, 10), la.sge(50, 10)],
        remote: rb.remote(0),
      });
      assert.equal((await one(a.cq)).status, 'success');
      const r = await one(b.cq);
      assert.deepEqual(
        [r.wrId, r.status, r.opcode, r.imm, r.byteLen],
        [7, 'success', 'recv_imm', 0xdeadbeef, 20],
      );
      assert.deepEqual([...rb.buffer.subarray(10, 20)], [...la.buffer.subarray(50, 60)]);
      // a large write_imm (received in place on streams) still delivers its immediate once
      b.qp.postRecv({ wrId: 9, sgl: [] });
      a.qp.postSend({
        wrId: 5,
        opcode: 'write_imm',
        imm: 42,
        sgl: [la.sge(0, 3 << 20)],
        remote: rb.remote(7),
      });
      assert.equal((await one(a.cq)).status, 'success');
      const ri = await one(b.cq);
      assert.deepEqual([ri.wrId, ri.status, ri.imm, ri.byteLen], [9, 'success', 42, 3 << 20]);
      assert.equal(hash(rb.buffer.subarray(7, 7 + (3 << 20))), hash(la.buffer.subarray(0, 3 << 20)));
      // a small write then a large one over it, back to back: the large one wins
      la.buffer.fill(0xaa, 0, 100);
      la.buffer.fill(0xbb, 100, 100 + 100_000);
      a.qp.postSend({
        wrId: 6,
        opcode: 'write',
        sgl: [la.sge(0, 100)],
        remote: rb.remote(0),
        signaled: false,
      });
      a.qp.postSend({ wrId: 7, opcode: 'write', sgl: [la.sge(100, 100_000)], remote: rb.remote(0) });
      assert.deepEqual((await one(a.cq)).wrId, 7);
      assert.ok(
        rb.buffer.subarray(0, 100_000).every((x) => x === 0xbb),
        'writes are placed in order',
      );
      // a UC queue pair offers no RDMA READ (refused before posting: rdma-queue-pair.test.ts)
      if (verbs === undefined || verbs.reads) {
        fill(rb, 9);
        la.buffer.fill(0);
        a.qp.postSend({
          wrId: 3,
          opcode: 'read',
          sgl: [la.sge(0, 5), la.sge(1000, big - 1000)],
          remote: rb.remote(1),
        });
        const rd = await one(a.cq);
        assert.deepEqual([rd.status, rd.opcode], ['success', 'read']);
        assert.deepEqual([...la.buffer.subarray(0, 5)], [...rb.buffer.subarray(1, 6)]);
        assert.equal(hash(la.buffer.subarray(1000)), hash(rb.buffer.subarray(6, 6 + big - 1000)));
      }
      const bigSend = b.pd.allocate(big, Access.LOCAL_WRITE);
      b.qp.postRecv({ wrId: 8, sgl: [bigSend.sge()] });
      a.qp.postSend({ wrId: 4, opcode: 'send', sgl: [la.sge()] });
      assert.equal((await one(a.cq)).status, 'success');
      const rs = await one(b.cq);
      assert.deepEqual([rs.status, rs.byteLen], ['success', big]);
      assert.equal(hash(bigSend.buffer), hash(la.buffer));
    } finally {
      await close();
    }
  });

  test(
    name('forged keys: random, +-0x100, another domain, deregistered -> remote_key'),
    { ...ms(30_000), ...refusals },
    async () => {
      const forge: ((a: End, b: End, t: MemoryRegion, o: MemoryRegion) => number)[] = [
        () => 0x12345678,
        (_a, _b, t) => (t.rkey + 0x100) >>> 0,
        (_a, _b, t) => (t.rkey - 0x100) >>> 0,
        (_a, _b, _t, o) => o.rkey,
        (_a, b) => {
          const dead = b.pd.allocate(64, ALL);
          dead.deregister();
          return dead.rkey;
        },
      ];
      for (const f of forge) {
        await refused(
          open,
          (a, b, t, o) => ({ op: 'write', addr: t.addr, rkey: f(a, b, t, o) }),
          ...refusal('remote_key', 'rejectedKey'),
        );
        // large enough to be received in place on streams: refused before any byte lands
        await refused(
          open,
          (a, b, t, o) => ({ op: 'write', addr: t.addr, rkey: f(a, b, t, o), length: 200_000 }),
          ...refusal('remote_key', 'rejectedKey'),
        );
        await refused(
          open,
          (a, b, t, o) => ({ op: 'read', addr: t.addr, rkey: f(a, b, t, o) }),
          ...refusal('remote_key', 'rejectedKey'),
        );
      }
    },
  );

  test(
    name('ranges: below the base, past the end, wrapping 2^64, length >= 2^31 -> remote_bounds'),
    { ...ms(30_000), ...refusals },
    async () => {
      await refused(
        open,
        (_a, _b, t) => ({ op: 'write', addr: t.addr - 1n, rkey: t.rkey }),
        ...refusal('remote_bounds', 'rejectedBounds'),
      );
      await refused(
        open,
        (_a, _b, t) => ({ op: 'write', addr: t.addr, rkey: t.rkey, length: 200_000 }),
        ...refusal('remote_bounds', 'rejectedBounds'),
      );
      await refused(
        open,
        (_a, _b, t) => ({ op: 'write', addr: t.addr + 8192n - 63n, rkey: t.rkey }),
        ...refusal('remote_bounds', 'rejectedBounds'),
      );
      await refused(
        open,
        (_a, _b, t) => ({ op: 'read', addr: t.addr + 8193n, rkey: t.rkey }),
        ...refusal('remote_bounds', 'rejectedBounds'),
      );
      await refused(
        open,
        (_a, _b, t) => ({ op: 'write', addr: (1n << 64n) - 16n, rkey: t.rkey }),
        ...refusal('remote_bounds', 'rejectedBounds'),
      );
      await refused(
        open,
        (_a, _b, t) => ({ op: 'read', addr: (1n << 64n) - 1n, rkey: t.rkey }),
        ...refusal('remote_bounds', 'rejectedBounds'),
      );
      await refused(
        open,
        // 4 GiB below the base; a real region may lie below 4 GiB, where this wraps to near 2^64
        (_a, _b, t) => ({ op: 'write', addr: BigInt.asUintN(64, t.addr - (1n << 32n)), rkey: t.rkey }),
        ...refusal('remote_bounds', 'rejectedBounds'),
      );
      // a read request whose length field says 2^31: forged on the wire through a raw frame
      // (a NIC's wire cannot be forged through the verbs API)
      if (!verbs) {
        await rawRead(open, 0x80000000);
        await rawRead(open, 0xffffffff);
      }
    },
  );

  test(
    name('a write to a read-only region and a read from a write-only one -> remote_access'),
    { ...ms(30_000), ...refusals },
    async () => {
      await refused(
        open,
        (_a, _b, t) => ({ op: 'write', addr: t.addr, rkey: t.rkey }),
        ...refusal('remote_access', 'rejectedAccess'),
        Access.REMOTE_READ,
      );
      await refused(
        open,
        (_a, _b, t) => ({ op: 'read', addr: t.addr, rkey: t.rkey }),
        ...refusal('remote_access', 'rejectedAccess'),
        Access.REMOTE_WRITE,
      );
      await refused(
        open,
        (_a, _b, t) => ({ op: 'write', addr: t.addr, rkey: t.rkey }),
        ...refusal('remote_access', 'rejectedAccess'),
        Access.LOCAL_WRITE,
      );
    },
  );

  test(
    name('100,000 registrations: no live duplicate keys, no constant step'),
    { ...ms(30_000), ...notOnVerbs('the device assigns the keys (rxe: a table index and 8 random bits)') },
    async () => {
      const dev = await open();
      try {
        const pd = dev.allocPd();
        const buf = new Uint8Array(64);
        const mrs: MemoryRegion[] = [];
        const seen = new Set<number>();
        for (let i = 0; i < 100_000; i++) {
          const mr = pd.register(buf, Access.REMOTE_WRITE);
          assert.ok(mr.rkey !== 0 && !seen.has(mr.rkey), `rkey ${mr.rkey} is unique among live regions`);
          seen.add(mr.rkey);
          mrs.push(mr);
        }
        const steps = new Set<number>();
        for (let i = 1; i < 1000; i++)
          steps.add(((mrs[i] as MemoryRegion).rkey - (mrs[i - 1] as MemoryRegion).rkey) >>> 0);
        assert.ok(steps.size > 990, `rkeys must not follow a step (${steps.size} distinct steps of 999)`);
        const lkeys = new Set(mrs.map((m) => m.lkey));
        assert.equal(lkeys.size, 100_000);
        for (const mr of mrs) mr.deregister();
        assert.equal(mrs.filter((m) => m.live).length, 0);
      } finally {
        await dev.close();
      }
    },
  );

  test(
    name('registration pool: slices are disjoint, reused after release, hits and misses counted'),
    ms(30_000),
    async () => {
      const dev = await open();
      try {
        const pool = dev.allocPd().createPool({ chunkBytes: 1 << 16 });
        const s1 = pool.acquire(1000);
        const s2 = pool.acquire(1000);
        assert.equal(s1.mr, s2.mr);
        assert.ok(s1.offset + 1000 <= s2.offset || s2.offset + 1000 <= s1.offset);
        assert.deepEqual([pool.stats().misses, pool.stats().hits], [1, 1]);
        s1.release();
        const s3 = pool.acquire(900);
        assert.equal(s3.offset, s1.offset);
        const huge = pool.acquire(1 << 20);
        assert.ok(huge.mr !== s1.mr && huge.view.length === 1 << 20);
        assert.deepEqual(pool.stats().misses, 2);
        assert.equal(pool.stats().slicesInUse, 3);
        pool.close();
        assert.equal(s1.mr.live, false);
      } finally {
        await dev.close();
      }
    },
  );

  test(
    name('truncated and oversized frames end the connection; memory untouched, peer sees peer_lost'),
    { ...ms(30_000), ...notOnVerbs('no software frames: the NIC parses the wire') },
    async () => {
      const bad: Uint8Array[] = [];
      const oversized = new Uint8Array(8);
      putU32(oversized, 0, 0x7fffffff);
      bad.push(oversized);
      const tiny = new Uint8Array(8);
      putU32(tiny, 0, 3);
      bad.push(tiny);
      const shortWrite = new Uint8Array(4 + 12);
      putU32(shortWrite, 0, 12);
      shortWrite[4] = 2; // WRITE with a 12-byte body: its header alone needs 24
      bad.push(shortWrite);
      const unknown = new Uint8Array(4 + 8);
      putU32(unknown, 0, 8);
      unknown[4] = 99;
      bad.push(unknown);
      // a bad frame followed by more bytes in the same read: nothing after it is executed
      const write = new Uint8Array(4 + 24 + 8);
      putU32(write, 0, 32);
      write[4] = 2;
      const both = new Uint8Array(unknown.length + write.length);
      both.set(unknown, 0);
      both.set(write, unknown.length);
      bad.push(both);
      for (const bytes of bad) {
        const { a, b, close } = await pair(open);
        try {
          const target = b.pd.allocate(4096, ALL);
          fill(target, 11);
          const before = hash(target.buffer);
          const dst = a.pd.allocate(64, Access.LOCAL_WRITE);
          a.qp.postRecv({ wrId: 5, sgl: [dst.sge()] });
          b.qp.postRecv({ wrId: 6, sgl: [target.sge(0, 64)] });
          (a.qp as unknown as { sendRaw(b: Uint8Array): void }).sendRaw(bytes);
          const wb = await one(b.cq);
          assert.deepEqual([wb.wrId, wb.status], [6, 'peer_lost']);
          const wa = await one(a.cq);
          assert.deepEqual([wa.wrId, wa.status], [5, 'peer_lost']);
          assert.equal(b.dev.stats().malformedFrames, 1);
          assert.equal(hash(target.buffer), before);
          a.qp.postSend({ wrId: 9, opcode: 'send', sgl: [] });
          assert.equal((await one(a.cq)).status, 'peer_lost');
        } finally {
          await close();
        }
      }
    },
  );

  test(name('a peer without the secret is refused; the listener goes on'), ms(30_000), async () => {
    const da = await open();
    const db = await open();
    try {
      const l = await db.listen({ host: '127.0.0.1', port: 0, secret: SECRET });
      const pa = da.allocPd();
      const ca = da.createCq();
      await assert.rejects(
        da.connect({ host: '127.0.0.1', port: l.port, secret: 'wrong', pd: pa, cq: ca, timeoutMs: 3000 }),
        (e: unknown) => isTandemError(e, 'FABRIC_AUTH_FAILED'),
      );
      const pb = db.allocPd();
      const cb = db.createCq();
      const [qb] = await Promise.all([
        l.accept({ pd: pb, cq: cb, timeoutMs: 3000 }),
        da.connect({ host: '127.0.0.1', port: l.port, secret: SECRET, pd: pa, cq: ca, timeoutMs: 3000 }),
      ]);
      assert.equal(qb.state, 'ready');
      assert.equal(l.authFailures, 1);
      await l.close();
    } finally {
      await da.close();
      await db.close();
    }
  });

  test(
    name('abort() and AbortSignal end a blocked wait; the deadline throws FABRIC_WAIT_TIMEOUT'),
    ms(30_000),
    async () => {
      const { a, close } = await pair(open);
      try {
        const t0 = Date.now();
        setTimeout(() => a.cq.abort('test'), 30);
        await assert.rejects(a.cq.wait({ timeoutMs: 10_000 }), (e: unknown) => isTandemError(e, 'ABORTED'));
        assert.ok(Date.now() - t0 < 5000);
        const ac = new AbortController();
        setTimeout(() => ac.abort(), 30);
        await assert.rejects(a.cq.wait({ timeoutMs: 10_000, signal: ac.signal }), (e: unknown) =>
          isTandemError(e, 'ABORTED'),
        );
        await assert.rejects(a.cq.wait({ timeoutMs: 50 }), (e: unknown) =>
          isTandemError(e, 'FABRIC_WAIT_TIMEOUT'),
        );
        assert.deepEqual(a.cq.poll(), []);
      } finally {
        await close();
      }
    },
  );

  test(name('local protection: dead or foreign lkeys and non-writable targets'), ms(30_000), async () => {
    const { a, close } = await pair(open);
    try {
      const ro = a.pd.allocate(64, Access.NONE);
      a.qp.postRecv({ wrId: 1, sgl: [ro.sge()] });
      assert.equal((await one(a.cq)).status, 'local_protection');
      const foreign = a.dev.allocPd().allocate(64, ALL);
      a.qp.postSend({ wrId: 2, opcode: 'send', sgl: [foreign.sge()] });
      assert.equal((await one(a.cq)).status, 'local_protection');
      a.qp.postSend({ wrId: 3, opcode: 'send', sgl: [] });
      assert.equal((await one(a.cq)).status, 'flushed');
    } finally {
      await close();
    }
  });

  test(
    name("closing one side completes the other side's pending work with peer_lost"),
    ms(30_000),
    async () => {
      const { a, b, close } = await pair(open);
      try {
        const dst = a.pd.allocate(64, Access.LOCAL_WRITE);
        a.qp.postRecv({ wrId: 1, sgl: [dst.sge()] });
        await b.qp.close();
        assert.deepEqual((await one(a.cq)).status, 'peer_lost');
        a.qp.postSend({ wrId: 2, opcode: 'write', sgl: [dst.sge()], remote: { addr: 0n, rkey: 1 } });
        assert.deepEqual((await one(a.cq)).status, 'peer_lost');
      } finally {
        await close();
      }
    },
  );
}

/** A hand-built READ request whose length field is `len` (the API cannot express >= 2^31). */
async function rawRead(open: Open, len: number): Promise<void> {
  const { a, b, close } = await pair(open);
  try {
    const target = b.pd.allocate(4096, ALL);
    const qp = a.qp as unknown as { sendRaw(b: Uint8Array): void; sendPsn: number };
    const psn = qp.sendPsn;
    const f = new Uint8Array(4 + 24);
    putU32(f, 0, 24);
    f[4] = 3;
    putU32(f, 8, psn);
    putU32(f, 12, target.rkey);
    putU32(f, 16, Number(target.addr & 0xffffffffn));
    putU32(f, 20, Number(target.addr >> 32n));
    putU32(f, 24, len);
    qp.sendRaw(f);
    // the responder refuses it (counted, nothing read) and answers for a psn the requester never used
    const deadline = Date.now() + 5000;
    while (b.dev.stats().rejectedBounds < 1 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 5));
    assert.equal(b.dev.stats().rejectedBounds, 1);
  } finally {
    await close();
  }
}
