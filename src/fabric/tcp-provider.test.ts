import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createConnection } from 'node:net';
import { isTandemError } from '../errors/index.js';
import { conformance } from './conformance.cases.js';
import {
  Access,
  openDevice,
  type CompletionQueue,
  type Device,
  type ProtectionDomain,
  type QueuePair,
} from './index.js';
import { putU32 } from './wire.js';

conformance('tcp');

test(
  'tcp: a raw client that skips or fakes the handshake never becomes a queue pair',
  { timeout: 20_000 },
  async () => {
    const dev = await openDevice('tcp');
    const l = await dev.listen({ host: '127.0.0.1', port: 0, secret: 'right' });
    try {
      // 1: data frames straight away (a WRITE to some key): the listener closes the socket
      const frame = new Uint8Array(4 + 24 + 8);
      putU32(frame, 0, 32);
      frame[4] = 2;
      // 2: a hello then a made-up proof: counted as an authentication failure
      const hello = JSON.stringify({ t: 'hello', v: 1, provider: 'tcp', nonce: '00'.repeat(32) });
      const fake = JSON.stringify({ t: 'proof', proof: 'ab'.repeat(32), psn: 1, info: {}, extra: {} });
      const msg = (s: string): Buffer => {
        const b = Buffer.from(s);
        const h = Buffer.alloc(4);
        h.writeUInt32LE(b.length);
        return Buffer.concat([h, b]);
      };
      for (const bytes of [Buffer.from(frame), Buffer.concat([msg(hello), msg(fake)])]) {
        await new Promise<void>((resolve, reject) => {
          const s = createConnection({ host: '127.0.0.1', port: l.port }, () => s.write(bytes));
          const timer = setTimeout(
            () => reject(new Error('the listener kept an unauthenticated socket open')),
            5000,
          );
          s.on('data', () => undefined);
          s.on('error', () => undefined);
          s.on('close', () => {
            clearTimeout(timer);
            resolve();
          });
        });
      }
      assert.equal(l.authFailures, 1);
      assert.equal(dev.stats().authFailures, 1);
      const pd = dev.allocPd();
      await assert.rejects(l.accept({ pd, cq: dev.createCq(), timeoutMs: 100 }), (e: unknown) =>
        isTandemError(e, 'FABRIC_WAIT_TIMEOUT'),
      );
    } finally {
      await l.close();
      await dev.close();
    }
  },
);

test(
  'tcp: a wait asleep on one device wakes for data on another device of the process',
  { timeout: 20_000 },
  async () => {
    const [a, b, c] = [await openDevice('tcp'), await openDevice('tcp'), await openDevice('tcp')];
    try {
      const pair = async (server: typeof a, client: typeof a) => {
        const l = await server.listen({ host: '127.0.0.1', port: 0, secret: 's' });
        const [pc, sc, cq] = [client.allocPd(), server.allocPd(), server.createCq()];
        const [s, k] = await Promise.all([
          l.accept({ pd: sc, cq }),
          client.connect({ host: '127.0.0.1', port: l.port, secret: 's', pd: pc, cq: client.createCq() }),
        ]);
        await l.close();
        return { s, k, pc, cq };
      };
      await pair(a, c); // device A: one idle connection, nothing will arrive on it
      const bc = await pair(b, c);
      const src = bc.pc.allocate(64, 0);
      bc.s.postRecv({ wrId: 1, sgl: [] });
      // C's send lands in B's socket at once (a loopback syscall); nobody has read it yet, and
      // nothing can until this synchronous sleep returns
      bc.k.postSend({ wrId: 2, opcode: 'send', sgl: [src.sge(0, 64)] });
      const sleep = (a as unknown as { sleep(ms: number): void }).sleep.bind(a);
      const t0 = performance.now();
      sleep(5000);
      const slept = performance.now() - t0;
      assert.ok(slept < 2500, `A's sleep returned after ${slept.toFixed(0)} ms: it did not see B's data`);
      const [wc] = await bc.cq.wait({ timeoutMs: 5000 });
      assert.equal(wc?.wrId, 1);
    } finally {
      for (const d of [a, b, c]) await d.close();
    }
  },
);

/**
 * Two tcp devices with one polled connection between them (a connects to b), or undefined
 * where the tcp data path is node:net (no koffi, or TANDEM_TCP_DATAPATH=net).
 */
async function polledPair(): Promise<
  | {
      a: Device;
      b: Device;
      qa: QueuePair;
      qb: QueuePair;
      apd: ProtectionDomain;
      bpd: ProtectionDomain;
      bcq: CompletionQueue;
    }
  | undefined
> {
  const { rawSocketLib } = await import('./socket-ffi.js');
  if (rawSocketLib() === null || process.env.TANDEM_TCP_DATAPATH === 'net') return undefined;
  const a = await openDevice('tcp');
  const b = await openDevice('tcp');
  const l = await b.listen({ host: '127.0.0.1', port: 0, secret: 's' });
  const [bpd, apd, bcq] = [b.allocPd(), a.allocPd(), b.createCq()];
  const [qb, qa] = await Promise.all([
    l.accept({ pd: bpd, cq: bcq, timeoutMs: 5000 }),
    a.connect({ host: '127.0.0.1', port: l.port, secret: 's', pd: apd, cq: a.createCq(), timeoutMs: 5000 }),
  ]);
  await l.close();
  return { a, b, qa, qb, apd, bpd, bcq };
}

test(
  'tcp: the polled data path gathers queued pieces into one writev (its sockets are non-blocking)',
  { timeout: 20_000 },
  async () => {
    const p = await polledPair();
    if (p === undefined) return; // node:net path
    try {
      for (const qp of [p.qa, p.qb]) {
        const t = (qp as unknown as { transport: { gather?: unknown; fd?: unknown } }).transport;
        assert.equal(typeof t.fd, 'number', 'a polled transport');
        assert.equal(t.gather, true, 'the socket is non-blocking, so flush() may use writev');
      }
    } finally {
      await p.a.close();
      await p.b.close();
    }
  },
);

test(
  'tcp: the background poller slows down once idle and speeds up when a frame comes',
  { timeout: 30_000 },
  async () => {
    const p = await polledPair();
    if (p === undefined) return; // node:net path
    const { b, qa, qb, apd, bpd, bcq } = p;
    try {
      const period = (): number => (b as unknown as { backgroundPollMs: number }).backgroundPollMs;
      const until = async (want: number): Promise<void> => {
        const deadline = Date.now() + 10_000;
        while (period() !== want && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
        assert.equal(period(), want);
      };
      await until(10); // nothing arrived for a while
      qb.postRecv({ wrId: 7, sgl: [bpd.allocate(8, Access.LOCAL_WRITE).sge()] });
      qa.postSend({ wrId: 1, opcode: 'send', sgl: [apd.allocate(8, 0).sge()] });
      await until(1); // b's application never polled: its background poller found the frame
      const [wc] = bcq.poll(1);
      assert.deepEqual([wc?.wrId, wc?.status], [7, 'success']);
    } finally {
      await p.a.close();
      await b.close();
    }
  },
);

test(
  'tcp: large WRITEs queued behind each other land whole, their payloads read straight into place',
  { timeout: 30_000 },
  async () => {
    const p = await polledPair();
    if (p === undefined) return; // node:net path
    const { qa, qb, apd, bpd, bcq } = p;
    try {
      const frame = 256 * 1024;
      const count = 6;
      const src = apd.allocate(frame * count, 0);
      for (let i = 0; i < src.buffer.length; i++) src.buffer[i] = (i * 7 + (i >> 18)) & 0xff;
      const dst = bpd.allocate(frame * count, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
      const mark = bpd.allocate(8, Access.LOCAL_WRITE);
      // count the bytes b reads into its scratch buffer (the rest goes straight into place)
      type Recv = (fd: number, buf: Uint8Array, len: number, flags: number) => number;
      const t = (qb as unknown as { transport: { lib: { recv: Recv }; scratch: Uint8Array } }).transport;
      const lib = t.lib;
      let viaScratch = 0;
      t.lib = Object.assign(Object.create(lib) as object, {
        recv: (fd: number, buf: Uint8Array, len: number, flags: number): number => {
          const n = lib.recv.call(lib, fd, buf, len, flags);
          if (buf === t.scratch && n > 0) viaScratch += n;
          return n;
        },
      }) as typeof lib;
      qb.postRecv({ wrId: 9, sgl: [mark.sge()] });
      // every frame is in b's socket before b reads any of it: the late reader
      for (let k = 0; k < count; k++)
        qa.postSend({
          wrId: k,
          opcode: 'write',
          sgl: [src.sge(k * frame, frame)],
          remote: { addr: dst.addr + BigInt(k * frame), rkey: dst.rkey },
          signaled: false,
        });
      qa.postSend({ wrId: 100, opcode: 'send', sgl: [apd.allocate(8, 0).sge()], signaled: false });
      const [wc] = await bcq.wait({ timeoutMs: 10_000, max: 1 });
      assert.deepEqual([wc?.wrId, wc?.status], [9, 'success']);
      assert.deepEqual(dst.buffer, src.buffer);
      // the first frame may come through scratch; the later ones' payloads go straight in
      assert.ok(viaScratch <= frame + count * 4096, `${viaScratch} bytes went through scratch`);
    } finally {
      await p.a.close();
      await p.b.close();
    }
  },
);
