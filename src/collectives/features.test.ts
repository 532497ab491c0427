import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createLocalWorld } from './local-world.js';
import { assertReduced, inputFor } from './collectives.cases.js';
import { linkBufferBytes } from './router/index.js';
import { BOARD_MAX } from './one-sided/board.js';

test('send/recv between any two ranks, with tags, relayed on a line', async () => {
  const comms = await createLocalWorld(4, { graph: 'line', timeoutMs: 20_000 });
  const got = new Float32Array(5000);
  await Promise.all([
    comms[0]!.send(
      3,
      Float32Array.from({ length: 5000 }, (_, i) => i),
      { tag: 7 },
    ),
    comms[3]!.recv(0, got, { tag: 7 }),
    comms[1]!.send(2, Float32Array.of(1)),
    comms[2]!.recv(1, new Float32Array(1)),
  ]);
  assert.equal(got[4999], 4999);
  assert.ok(comms[1]!.relayed + comms[2]!.relayed > 0);
  const [sent, got2] = await Promise.allSettled([
    comms[0]!.send(1, Float32Array.of(1), { tag: 1 }),
    comms[1]!.recv(0, new Float32Array(1), { tag: 2 }),
  ]);
  assert.equal(sent.status, 'fulfilled');
  assert.equal(
    got2.status === 'rejected' && (got2.reason as { code: string }).code,
    'COLL_MISMATCH',
    'a different tag is a mismatch',
  );
  await Promise.all(comms.map((c) => c.close()));
});

test('barrier and split: sub-communicators run collectives independently and correctly', async () => {
  const comms = await createLocalWorld(6, { graph: 'ring', timeoutMs: 20_000 });
  await Promise.all(comms.map((c) => c.barrier()));
  const subs = await Promise.all(comms.map((c) => c.split(c.rank % 2, -c.rank)));
  for (const [r, s] of subs.entries()) {
    assert.ok(s);
    assert.equal(s.size, 3);
    // key -rank: the highest world rank comes first
    assert.equal(s.rank, [2, 2, 1, 1, 0, 0][r]);
  }
  const sums = await Promise.all(
    subs.map(async (s, r) => {
      const d = Float32Array.of(r, 1);
      await s!.allReduce(d, { algorithm: 'ring' });
      return [...d];
    }),
  );
  sums.forEach((d, r) => assert.deepEqual(d, r % 2 === 0 ? [0 + 2 + 4, 3] : [1 + 3 + 5, 3]));
  const none = await Promise.all(comms.map((c) => c.split(c.rank === 0 ? -1 : 0)));
  assert.equal(none[0], undefined);
  const five = none.slice(1);
  const g = await Promise.all(five.map((s) => s!.allGather(Int32Array.of(s!.rank * 10))));
  assert.deepEqual([...g[0]!], [0, 10, 20, 30, 40]);
  await Promise.all([...subs, ...five].map((s) => s!.close()));
  await Promise.all(comms.map((c) => c.close()));
});

test('q8 wire format: identical on every rank, deterministic, error within the documented bound', async () => {
  const comms = await createLocalWorld(4, { timeoutMs: 20_000 });
  const n = 10_007;
  const input = (r: number): Float32Array =>
    Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37 + r) * (1 + (i % 5)));
  for (const algorithm of ['mesh', 'ring', 'tree'] as const) {
    const runs: Float32Array[][] = [];
    for (let run = 0; run < 2; run++) {
      runs.push(
        await Promise.all(
          comms.map(async (c) => {
            const d = input(c.rank);
            await c.allReduce(d, { wire: 'q8', algorithm });
            return d;
          }),
        ),
      );
    }
    let maxErr = 0;
    const inputs = [0, 1, 2, 3].map(input);
    for (let i = 0; i < n; i++) {
      let exact = 0;
      for (let r = 0; r < 4; r++) exact += inputs[r]![i]!;
      maxErr = Math.max(maxErr, Math.abs(runs[0]![0]![i]! - exact));
    }
    // each of the <= 2(n-1) quantisations adds at most blockMax/254; inputs are below 5, sums below 20
    assert.ok(maxErr < (2 * 3 * 20) / 254, `${algorithm}: max error ${maxErr}`);
    assert.ok(maxErr > 0, 'q8 really quantised');
    for (const r of [1, 2, 3])
      assert.deepEqual(runs[0]![r], runs[0]![0], `${algorithm}: rank ${r} identical`);
    assert.deepEqual(runs[1]![0], runs[0]![0], `${algorithm}: deterministic`);
  }
  await Promise.all(comms.map((c) => c.close()));
  // on a star (no ring of links) q8 runs over the tree of real links, still identical everywhere
  const star = await createLocalWorld(4, { graph: 'star', timeoutMs: 20_000 });
  const got = await Promise.all(
    star.map(async (c) => {
      const d = input(c.rank);
      await c.allReduce(d, { wire: 'q8' });
      return d;
    }),
  );
  assert.equal(star[0]!.lastAlgorithm, 'tree');
  for (const d of got) assert.deepEqual(d, got[0]);
  assert.equal(
    star.reduce((a, c) => a + c.relayed, 0),
    0,
    'nothing relayed',
  );
  await Promise.all(star.map((c) => c.close()));
});

test('results are deterministic run to run with random floats (fixed reduction order)', async () => {
  const comms = await createLocalWorld(5, { timeoutMs: 20_000 });
  const rand = (r: number, i: number): number => (Math.sin(i * 12.9898 + r * 78.233) * 43758.5453) % 1;
  for (const algorithm of ['mesh', 'ring', 'rhd', 'tree'] as const) {
    const a = await Promise.all(
      comms.map(async (c) => {
        const d = Float32Array.from({ length: 777 }, (_, i) => rand(c.rank, i));
        await c.allReduce(d, { algorithm });
        return d;
      }),
    );
    const b = await Promise.all(
      comms.map(async (c) => {
        const d = Float32Array.from({ length: 777 }, (_, i) => rand(c.rank, i));
        await c.allReduce(d, { algorithm });
        return d;
      }),
    );
    assert.deepEqual(a, b);
    for (const d of a) assert.deepEqual(d, a[0]);
    for (let i = 0; i < 777; i++) {
      let exact = 0;
      for (let r = 0; r < 5; r++) exact += Math.fround(rand(r, i));
      assert.ok(Math.abs(a[0]![i]! - exact) < 1e-5, `${algorithm} element ${i}`);
    }
  }
  const f16 = await Promise.all(
    comms.map(async (c) => {
      const d = inputFor('f16', c.rank, 100);
      await c.allReduce(d, { dtype: 'f16', op: 'mean' });
      return d;
    }),
  );
  for (const d of f16) assert.deepEqual(d, f16[0]);
  await Promise.all(comms.map((c) => c.close()));
});

test('several wires per linked pair: ring lanes stripe over them and results stay exact', async () => {
  const comms = await createLocalWorld(3, { graph: 'ring', wires: 3, timeoutMs: 20_000 });
  assert.equal(comms[0]!.router.wiresTo(1), 3);
  assert.equal(comms[0]!.router.wiresTo(2), 3);
  // two neighbours x three wires, each link with its default slot regions (what placement counts)
  assert.equal(comms[0]!.router.bufferBytes, 6 * linkBufferBytes());
  const count = 100_003;
  const out = await Promise.all(
    comms.map(async (c) => {
      const d = inputFor('f32', c.rank, count);
      await c.allReduce(d, { algorithm: 'ring' });
      return d;
    }),
  );
  assertReduced(out, 'sum', 'f32', 3, 'ring over 3 wires');
  const gathered = await Promise.all(
    comms.map((c) =>
      c.allGather(
        Int32Array.from({ length: 5000 }, (_, i) => i * 3 + c.rank),
        { algorithm: 'ring' },
      ),
    ),
  );
  for (let i = 0; i < 15000; i++) assert.equal(gathered[2]![i], (i % 5000) * 3 + Math.floor(i / 5000));
  await Promise.all(comms.map((c) => c.close()));
});

test('slotBytes is the fragment payload: a 4 KiB request carries 4 KiB per fragment, and the regions are what linkBufferBytes says', async () => {
  const comms = await createLocalWorld(2, { slots: 4, slotBytes: 4096, timeoutMs: 20_000 });
  assert.equal(comms[0]!.router.fragmentBytes, 4096);
  assert.equal(comms[0]!.router.bufferBytes, linkBufferBytes(4, 4096));
  assert.ok(
    linkBufferBytes(4, 4096) >= 2 * 4 * (4096 + 48),
    'every slot holds a header and a whole fragment',
  );
  // a message of exactly 3 fragments, and one a byte over, arrive whole
  const out = await Promise.all(
    comms.map(async (c) => {
      const a = Int32Array.from({ length: 3072 }, (_, i) => i + c.rank);
      const b = Int32Array.from({ length: 3073 }, (_, i) => i * 2 + c.rank);
      await c.allReduce(a, { algorithm: 'mesh' });
      await c.allReduce(b, { algorithm: 'ring' });
      return [a, b] as const;
    }),
  );
  for (const [a, b] of out) {
    assert.ok(a.every((v, i) => v === 2 * i + 1));
    assert.ok(b.every((v, i) => v === 4 * i + 1));
  }
  await Promise.all(comms.map((c) => c.close()));
});

test("large sends go zero-copy from the caller's buffer: registered once while reused, at most 16 kept", async () => {
  const comms = await createLocalWorld(2, { timeoutMs: 20_000 });
  const n = 300_000; // 1.2 MB: fragments of 256 KiB, written from the caller's memory
  const bufs = comms.map((c) => Float32Array.from({ length: n }, (_, i) => c.rank + (i % 13)));
  for (let k = 0; k < 3; k++) {
    for (const b of bufs) b.forEach((_, i) => (b[i] = i % 13));
    await Promise.all(comms.map((c, r) => c.allReduce(bufs[r]!, { algorithm: 'ring' })));
    for (const b of bufs)
      assert.ok(
        b.every((v, i) => v === 2 * (i % 13)),
        `call ${k}`,
      );
  }
  for (const c of comms) assert.equal(c.router.registrations, 1, 'one registration for the reused buffer');
  for (let k = 0; k < 20; k++) {
    const fresh = comms.map((c) => new Float32Array(n).fill(c.rank + 1));
    await Promise.all(comms.map((c, r) => c.allReduce(fresh[r]!, { algorithm: 'ring' })));
    for (const f of fresh) assert.ok(f.every((v) => v === 3));
  }
  for (const c of comms) assert.equal(c.router.registrations, 16, 'the LRU stays bounded');
  await Promise.all(comms.map((c) => c.close()));
});

test('small all-reduces on a direct full mesh go by one-sided writes (the board), others by messages', async () => {
  const mesh = await createLocalWorld(3, { timeoutMs: 20_000 });
  const run = (comms: typeof mesh, count: number, op: 'sum' | 'max'): Promise<number[][]> =>
    Promise.all(
      comms.map(async (c) => {
        const d = Float32Array.from(
          { length: count },
          (_, i) => (c.rank + 1) * (i + 1) * (c.rank === 1 ? -1 : 1),
        );
        await c.allReduce(d, { op });
        return [...d];
      }),
    );
  // every rank folds ranks 0..2 in order: (1 - 2 + 3) * (i + 1) for sum, 3 * (i + 1) for max
  for (let k = 0; k < 5; k++) {
    for (const got of await run(mesh, 7, 'sum')) assert.deepEqual(got, [2, 4, 6, 8, 10, 12, 14]);
    for (const got of await run(mesh, 64, 'max'))
      assert.deepEqual(
        got,
        Array.from({ length: 64 }, (_, i) => 3 * (i + 1)),
      );
    // the largest the board carries: BOARD_MAX bytes of f32
    for (const got of await run(mesh, BOARD_MAX / 4, 'sum'))
      assert.deepEqual(
        got,
        Array.from({ length: BOARD_MAX / 4 }, (_, i) => 2 * (i + 1)),
      );
  }
  // mean divides after the fold; a bad option is a typed error on the board's path too, and the world goes on
  for (const got of await Promise.all(
    mesh.map(async (c) => {
      const d = Int32Array.of(3 * (c.rank + 1));
      await c.allReduce(d, { op: 'mean' });
      return [...d];
    }),
  ))
    assert.deepEqual(got, [6]);
  await assert.rejects(mesh[0]!.allReduce(new Float32Array(2), { op: 'median' as never }), {
    code: 'COLL_BAD_ARGUMENT',
  });
  const puts = mesh.map((c) => c.puts);
  assert.deepEqual(puts, [32, 32, 32], 'each of the 16 calls wrote once to each of the 2 peers');
  for (const got of await run(mesh, BOARD_MAX / 4 + 1, 'sum'))
    assert.equal(got[BOARD_MAX / 4], 2 * (BOARD_MAX / 4 + 1)); // past BOARD_MAX: by messages
  assert.deepEqual(
    mesh.map((c) => c.puts),
    puts,
  );
  // different counts on different ranks, both small enough for the board: COLL_MISMATCH, not a hang
  const bad = await Promise.allSettled(mesh.map((c) => c.allReduce(new Float32Array(c.rank === 2 ? 3 : 2))));
  assert.ok(
    bad.some((r) => r.status === 'rejected' && (r.reason as { code: string }).code === 'COLL_MISMATCH'),
    JSON.stringify(bad.map((r) => r.status === 'rejected' && (r.reason as { code: string }).code)),
  );
  await Promise.all(mesh.map((c) => c.close()));

  // on a line, ranks 0 and 2 are not linked: no board, and the same results by messages
  const line = await createLocalWorld(3, { graph: 'line', timeoutMs: 20_000 });
  for (const got of await run(line, 7, 'sum')) assert.deepEqual(got, [2, 4, 6, 8, 10, 12, 14]);
  assert.deepEqual(
    line.map((c) => c.puts),
    [0, 0, 0],
  );
  await Promise.all(line.map((c) => c.close()));
});
