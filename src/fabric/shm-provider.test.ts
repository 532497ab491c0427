import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { conformance } from './conformance.cases.js';
import { Access, expectSuccess, openDevice } from './index.js';
import type { ShmDevice } from './shm-provider.js';
import { PLACE_SMALL_MAX } from './shm-transport.js';

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

test('shm: a direct write waits only for unread writes that overlap it (64-bit addresses, exact)', async () => {
  const { UnreadWrites } = await import('./shm-unread-writes.js');
  const u = new UnreadWrites(0);
  // addresses far above 2^53 (regions get random 64-bit addresses), one write crossing a 2^32 boundary
  const hi = 0x9f3a_1c07;
  u.write(100, 7, hi, 0xffff_ff00, 0x200); // [hi:ffffff00, hi+1:00000100)
  u.write(200, 7, hi + 1, 0x1000, 64);
  assert.equal(u.allows(0, 7, hi + 1, 0x0000_00ff, 1 << 20), false, 'overlaps the tail of the first');
  assert.equal(u.allows(0, 7, hi + 1, 0x100, 0xf00), true, 'between the two');
  assert.equal(u.allows(0, 7, hi + 1, 0x100, 0xf01), false, 'touches the second');
  assert.equal(u.allows(0, 7, hi, 0xffff_fe00, 0x100), true, 'ends where the first begins');
  assert.equal(u.allows(0, 7, hi, 0xffff_fe00, 0x101), false);
  assert.equal(u.allows(0, 8, hi + 1, 0x1000, 64), true, 'another key');
  assert.equal(u.allows(100, 7, hi + 1, 0, 64), true, 'the first was read');
  assert.equal(u.allows(100, 7, hi + 1, 0x1000, 1), false);
  assert.equal(u.allows(200, 7, hi + 1, 0x1000, 1), true, 'both were read');
  // a SEND lands wherever the peer posted a receive: nothing goes direct until it is read
  u.barrier(300);
  assert.equal(u.allows(299, 9, 0, 0, 1), false);
  assert.equal(u.allows(300, 9, 0, 0, 1), true);
});

test('shm: the segments a device and a connection create are what fabricFootprint counts', async () => {
  const { readFileSync } = await import('node:fs');
  const { fabricFootprint } = await import('./footprint.js');
  // the shm segments this process maps, by name (rings are unlinked once both sides mapped
  // them, and a ring is mapped by both ends), other than the callers' memory regions
  const mapped = (): Map<string, number> => {
    const seen = new Map<string, number>();
    for (const line of readFileSync('/proc/self/maps', 'utf8').split('\n')) {
      const f = line.split(/\s+/);
      const name = f[5] ?? '';
      if (!name.startsWith(`/dev/shm/tandem-${process.pid}-`) || name.endsWith('-mr')) continue;
      const [lo, hi] = (f[0] as string).split('-').map((x) => BigInt(`0x${x}`));
      seen.set(name, Number((hi as bigint) - (lo as bigint)));
    }
    return seen;
  };
  // other tests' devices may still be closing: count only segments that are new
  const earlier = new Set(mapped().keys());
  const ours = (): number => [...mapped()].filter(([n]) => !earlier.has(n)).reduce((a, [, b]) => a + b, 0);
  const [da, db] = [await openDevice('shm'), await openDevice('shm')];
  try {
    const fp = fabricFootprint('shm');
    assert.equal(ours(), 2 * fp.device, 'two devices');
    const [pa, pb] = [da.allocPd(), db.allocPd()];
    const l = await da.listen({ port: 0, secret: 's' });
    await Promise.all([
      l.accept({ pd: pa, cq: da.createCq() }),
      db.connect({ host: '127.0.0.1', port: l.port, secret: 's', pd: pb, cq: db.createCq() }),
    ]);
    assert.equal(ours(), 2 * fp.device + 2 * fp.perConnection, 'and one connection on each side');
    await l.close();
  } finally {
    await da.close();
    await db.close();
  }
});

test('shm: a write the requester placed itself completes without the responder running; a small one waits for its ACK', async () => {
  const [da, db] = [await openDevice('shm'), await openDevice('shm')];
  try {
    const [pa, pb] = [da.allocPd(), db.allocPd()];
    const [ca, cb] = [da.createCq(), db.createCq()];
    const src = pa.allocate(256 * 1024, Access.NONE);
    const dst = pb.allocate(256 * 1024, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
    const l = await da.listen({ port: 0, secret: 's' });
    const [qa, qb] = await Promise.all([
      l.accept({ pd: pa, cq: ca }),
      db.connect({ host: '127.0.0.1', port: l.port, secret: 's', pd: pb, cq: cb }),
    ]);
    qb.postRecv({ wrId: 5, sgl: [] });
    src.buffer.fill(7);
    // No await between posting and polling: B's side cannot run, so only the requester can
    // have completed these.
    qa.postSend({
      wrId: 1,
      opcode: 'write_imm',
      imm: 3,
      sgl: [src.sge(0, 128 * 1024)],
      remote: dst.remote(0),
    });
    qa.postSend({ wrId: 2, opcode: 'write', sgl: [src.sge(0, 64 * 1024)], remote: dst.remote(128 * 1024) });
    const now = ca.poll(8);
    assert.deepEqual(
      now.map((w) => [w.wrId, w.status]),
      [
        [1, 'success'],
        [2, 'success'],
      ],
    );
    assert.equal(
      dst.buffer[128 * 1024 + 64 * 1024 - 1],
      7,
      'the data is in place when the completion says so',
    );
    // the responder still delivers the immediate
    const [rc] = expectSuccess(await cb.wait({ timeoutMs: 5000 }));
    assert.deepEqual([rc?.wrId, rc?.imm], [5, 3]);
    // a small write goes through the ring: its completion is the responder's ACK
    qa.postSend({ wrId: 3, opcode: 'write', sgl: [src.sge(0, 64)], remote: dst.remote(0) });
    assert.equal(ca.poll(8).length, 0, 'not before the responder ran');
    const [wc] = expectSuccess(await ca.wait({ timeoutMs: 5000 }));
    assert.equal(wc?.wrId, 3);
    // completions stay in posting order: a placed write behind an unacknowledged one waits for it
    qa.postSend({ wrId: 4, opcode: 'write', sgl: [src.sge(0, 64)], remote: dst.remote(0) });
    qa.postSend({ wrId: 5, opcode: 'write', sgl: [src.sge(0, 64 * 1024)], remote: dst.remote(64 * 1024) });
    assert.equal(ca.poll(8).length, 0);
    const ids: number[] = [];
    while (ids.length < 2)
      for (const w of expectSuccess(await ca.wait({ timeoutMs: 5000 }))) ids.push(w.wrId);
    assert.deepEqual(ids, [4, 5]);
    await l.close();
  } finally {
    await da.close();
    await db.close();
  }
});

test('shm: a small unsignaled write is placed with no frame, except behind an unread request', async () => {
  const [da, db] = [await openDevice('shm'), await openDevice('shm')];
  try {
    const max = PLACE_SMALL_MAX;
    const [pa, pb] = [da.allocPd(), db.allocPd()];
    const [ca, cb] = [da.createCq(), db.createCq()];
    const src = pa.allocate(4 * max, Access.NONE);
    const dst = pb.allocate(4 * max, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
    const l = await da.listen({ port: 0, secret: 's' });
    const [qa, qb] = await Promise.all([
      l.accept({ pd: pa, cq: ca }),
      db.connect({ host: '127.0.0.1', port: l.port, secret: 's', pd: pb, cq: cb }),
    ]);
    for (let i = 0; i < max; i++) src.buffer[i] = 1 + (i % 251);
    src.buffer.fill(4, max, 2 * max + 1);
    // no await and no poll on B's side: the bytes are there because A put them there
    qa.postSend({ wrId: 1, opcode: 'write', sgl: [src.sge(0, max)], remote: dst.remote(0), signaled: false });
    assert.deepEqual(
      dst.buffer.subarray(0, max),
      src.buffer.subarray(0, max),
      'placed at once, exactly its bytes',
    );
    assert.equal(dst.buffer[max], 0, 'and nothing past them');
    // short writes, their edges in whole words when both ends are 4-byte aligned, else byte by byte: exactly their bytes
    const area = 3 * max;
    for (const [from, to] of [
      [0, 0],
      [4, 8],
      [1, 0],
      [0, 2],
      [3, 5],
    ] as const) {
      for (const len of [...Array.from({ length: 132 }, (_, i) => i + 1), 200, 1024, 1027, 4100]) {
        dst.buffer.fill(0, area, area + len + 32);
        qa.postSend({
          wrId: 9,
          opcode: 'write',
          sgl: [src.sge(from, len)],
          remote: dst.remote(area + 16 + to),
          signaled: false,
        });
        const got = dst.buffer.subarray(area + 16 + to, area + 16 + to + len);
        assert.deepEqual(got, src.buffer.subarray(from, from + len), `${len} bytes from ${from} to ${to}`);
        assert.equal(dst.buffer[area + 15 + to], 0, `nothing before ${len} bytes from ${from} to ${to}`);
        assert.equal(dst.buffer[area + 16 + to + len], 0, `nothing past ${len} bytes from ${from} to ${to}`);
      }
    }
    // one byte more than the limit goes as a frame: B must run before it lands
    qa.postSend({
      wrId: 2,
      opcode: 'write',
      sgl: [src.sge(max, max + 1)],
      remote: dst.remote(2 * max),
      signaled: false,
    });
    assert.equal(dst.buffer[2 * max], 0, 'a longer write is framed');
    // a SEND B has not read yet is a barrier: a small write after it is framed too and lands after it
    const got = pb.allocate(64, Access.LOCAL_WRITE);
    qb.postRecv({ wrId: 7, sgl: [got.sge(0, 8)] });
    qa.postSend({ wrId: 3, opcode: 'send', sgl: [src.sge(0, 8)], signaled: false });
    qa.postSend({
      wrId: 4,
      opcode: 'write',
      sgl: [src.sge(max, 8)],
      remote: dst.remote(max),
      signaled: false,
    });
    assert.equal(dst.buffer[max], 0, 'not placed past the unread send');
    const [rc] = expectSuccess(await cb.wait({ timeoutMs: 5000 }));
    assert.equal(rc?.wrId, 7);
    for (const at of [2 * max, max]) {
      const deadline = Date.now() + 5000;
      while (dst.buffer[at] !== 4 && Date.now() < deadline) {
        cb.poll();
        await new Promise((r) => setTimeout(r, 1));
      }
      assert.equal(dst.buffer[at], 4, `the framed write to ${at} landed`);
    }
    // the placed write's bytes are still what it wrote (nothing framed rewrote them)
    assert.equal(dst.buffer[max - 1], src.buffer[max - 1]);
    // and a write to memory B no longer exposes is framed, and fails there, not placed
    dst.deregister();
    qa.postSend({ wrId: 5, opcode: 'write', sgl: [src.sge(0, 8)], remote: dst.remote(0), signaled: false });
    const [bad] = await ca.wait({ timeoutMs: 5000 });
    assert.equal(bad?.wrId, 5);
    assert.notEqual(bad?.status, 'success');
    await l.close();
  } finally {
    await da.close();
    await db.close();
  }
});

test(
  'shm: a /dev/shm too small for a ring fails the connection with FABRIC_SHM_FAILED (it does not kill the process)',
  { timeout: 60_000 },
  async (t) => {
    if (spawnSync('unshare', ['-m', 'true']).status !== 0) {
      t.skip('unshare -m is not available (needs root)');
      return;
    }
    // In a mount namespace of its own, /dev/shm is a 2 MiB tmpfs: room for the devices'
    // doorbells and key tables, not for a 16 MiB ring (whose pages would SIGBUS when touched).
    const index = new URL('./index.ts', import.meta.url).href;
    const script = `
      import { openDevice } from ${JSON.stringify(index)};
      const [a, b] = [await openDevice('shm'), await openDevice('shm')];
      const l = await a.listen({ port: 0, secret: 's' });
      try {
        await b.connect({ host: '127.0.0.1', port: l.port, secret: 's', pd: b.allocPd(), cq: b.createCq(), timeoutMs: 5000 });
        console.log('RESULT connected');
      } catch (e) {
        console.log('RESULT ' + JSON.stringify({ code: e.code, message: e.message }));
      }
      await Promise.all([a.close(), b.close()]);`;
    const run = spawnSync(
      'unshare',
      [
        '-m',
        'sh',
        '-c',
        `mount -t tmpfs -o size=2m tmpfs /dev/shm && exec "$0" --import tsx --input-type=module -e "$1"`,
        process.execPath,
        script,
      ],
      { encoding: 'utf8', timeout: 45_000 },
    );
    assert.equal(run.signal, null, `the process died of ${run.signal}: ${run.stderr}`);
    const line = /^RESULT (.*)$/m.exec(run.stdout)?.[1];
    assert.ok(line !== undefined, `no result (exit ${run.status}): ${run.stderr}`);
    const result = JSON.parse(line) as { code: string; message: string };
    assert.equal(result.code, 'FABRIC_SHM_FAILED');
    assert.match(result.message, /\/dev\/shm has no room/);
  },
);

test('shm: small writes of every alignment, word-read headers and bytewise ones mixed, land in order with their immediates', async () => {
  const [da, db] = [await openDevice('shm'), await openDevice('shm')];
  try {
    const [pa, pb] = [da.allocPd(), db.allocPd()];
    const [ca, cb] = [da.createCq(), db.createCq()];
    const src = pa.allocate(4096, Access.NONE);
    const dst = pb.allocate(64 * 1024, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
    const l = await da.listen({ port: 0, secret: 's' });
    const [qa, qb] = await Promise.all([
      l.accept({ pd: pa, cq: ca }),
      db.connect({ host: '127.0.0.1', port: l.port, secret: 's', pd: pb, cq: cb }),
    ]);
    for (let i = 0; i < 4096; i++) src.buffer[i] = (i * 7 + 3) & 0xff;
    // lengths that leave the ring position unaligned (1, 3, 13), aligned (8, 64), and longer
    // than the word path takes (100), in every order, with SENDs between them
    const lengths = [8, 1, 8, 3, 64, 13, 8, 100, 0, 8, 64, 2];
    const rounds = 20;
    const n = lengths.length * rounds;
    for (let i = 0; i < n; i++) qb.postRecv({ wrId: i, sgl: [] });
    let at = 0;
    const expect: { at: number; len: number; imm: number }[] = [];
    for (let i = 0; i < n; i++) {
      const isSend = i % 5 === 4;
      // a SEND lands in the posted receive, which has no buffer: it carries nothing
      const len = isSend ? 0 : (lengths[i % lengths.length] as number);
      const imm = (i * 2654435761) >>> 0;
      qa.postSend({
        wrId: i,
        opcode: isSend ? 'send' : 'write_imm',
        imm,
        sgl: [src.sge(i % 4, len)],
        remote: dst.remote(at),
        signaled: false,
      });
      expect.push({ at, len, imm: isSend ? -1 : imm });
      at += len;
    }
    const got: { wrId: number; imm: number | undefined; byteLen: number }[] = [];
    for (let spins = 0; got.length < n; spins++) {
      if (spins > 2_000_000) assert.fail(`only ${got.length} of ${n} completions`);
      const wc = cb.pollOne();
      if (wc === undefined) {
        if ((spins & 1023) === 0) await new Promise((r) => setImmediate(r));
        continue;
      }
      assert.equal(wc.status, 'success');
      got.push({ wrId: wc.wrId, imm: wc.imm, byteLen: wc.byteLen });
    }
    for (let i = 0; i < n; i++) {
      const e = expect[i] as { at: number; len: number; imm: number };
      const g = got[i] as { wrId: number; imm: number | undefined; byteLen: number };
      assert.equal(g.wrId, i, 'completions in posting order');
      assert.equal(g.byteLen, e.len);
      if (e.imm < 0) continue;
      assert.equal(g.imm, e.imm);
      const want = src.buffer.subarray(i % 4, (i % 4) + e.len);
      assert.deepEqual([...dst.buffer.subarray(e.at, e.at + e.len)], [...want], `write ${i}`);
    }
    await l.close();
  } finally {
    await da.close();
    await db.close();
  }
});
