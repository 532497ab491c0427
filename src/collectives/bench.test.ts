import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkCollectiveGoals, fasterRows, runCollectivesBench, toRow, type AnchorRow } from './bench.js';

const ompi = (btl: string, bytes: number, time_us: number, busbw_GBps: number): AnchorRow => ({
  anchor: 'openmpi-allreduce',
  btl,
  ranks: 2,
  bytes,
  time_us,
  busbw_GBps,
});

test('the collectives goals compare 2-rank all-reduce rows with the matching Open MPI rows, each in its direction', () => {
  const anchors = [
    ompi('vader,self', 8, 0.8, 0.01),
    ompi('vader,self', 1 << 20, 200, 5.243),
    ompi('tcp,self', 1 << 20, 400, 2.621),
    ompi('vader,self', 8, 99, 0),
    ompi('tcp,self', 8, 1, 0),
  ].map((a, i) => (i === 3 ? { ...a, ranks: 4 } : a));
  // shm: 8 B at 2.0 us (2.5x: met), 1 MiB at 250 us (busbw below Open MPI's: not met)
  const shm = checkCollectiveGoals(
    [toRow('all-reduce', 2, 'shm', 'mesh', 8, 2.0), toRow('all-reduce', 2, 'shm', 'ring', 1 << 20, 250)],
    anchors,
  );
  assert.deepEqual(
    shm.map((g) => [g.goal, g.ratio, g.met]),
    [
      ['shm 2-rank 8 B all-reduce time <= 3x Open MPI', 2.5, true],
      ['shm 2-rank 1 MiB all-reduce busbw >= Open MPI', 0.8, false],
    ],
  );
  // tcp: 1 MiB at 480 us is 0.83x of Open MPI's busbw (not met: the goal is 1.0x); its 8 B row has no tcp goal
  const tcp = checkCollectiveGoals(
    [toRow('all-reduce', 2, 'tcp', 'mesh', 8, 30), toRow('all-reduce', 2, 'tcp', 'ring', 1 << 20, 480)],
    anchors,
  );
  assert.deepEqual(
    tcp.map((g) => [g.goal, g.ratio, g.met]),
    [['tcp 2-rank 1 MiB all-reduce busbw >= Open MPI', 0.83, false]],
  );
  // a missing anchor row leaves the verdict open; other ops, rank counts and sizes have no goals
  assert.equal(checkCollectiveGoals([toRow('all-reduce', 2, 'shm', 'ring', 1 << 20, 250)], [])[0]?.met, null);
  assert.deepEqual(
    checkCollectiveGoals(
      [
        toRow('all-gather', 2, 'shm', 'ring', 1 << 20, 250),
        toRow('all-reduce', 4, 'shm', 'mesh', 8, 2),
        toRow('all-reduce', 2, 'shm', 'mesh', 64, 2),
      ],
      anchors,
    ),
    [],
  );
});

test("rounds keep, per size, the faster row, in the first round's order, and add sizes a round brings", () => {
  const r1 = [
    toRow('all-reduce', 2, 'tcp', 'ring', 8, 10),
    toRow('all-reduce', 2, 'tcp', 'ring', 1 << 20, 500),
  ];
  const r2 = [
    toRow('all-reduce', 2, 'tcp', 'ring', 8, 12),
    toRow('all-reduce', 2, 'tcp', 'ring', 1 << 20, 400),
    toRow('all-reduce', 2, 'tcp', 'ring', 64, 11),
  ];
  const kept = fasterRows(
    fasterRows([], r1, (r) => String(r.bytes)),
    r2,
    (r) => String(r.bytes),
  );
  assert.deepEqual(
    kept.map((r) => [r.bytes, r.time_us]),
    [
      [8, 10],
      [1 << 20, 400],
      [64, 11],
    ],
  );
  assert.equal(kept[1], r2[1], "the faster round's row itself, with its algbw and busbw");
});

test("with computeMs a row times each call from the rank's arrival, not its chunk of arithmetic", async () => {
  // one rank: its all-reduce has nobody to wait for, so a call is far shorter than the 300 ms chunk before it
  const rows = await runCollectivesBench(
    { op: 'all-reduce', ranks: 1, provider: 'loopback', sizes: [1024], iterations: 3, computeMs: 300 },
    () => {},
  );
  assert.equal(rows.length, 1);
  assert.equal(rows[0]!.bytes, 1024);
  assert.ok(rows[0]!.time_us > 0 && rows[0]!.time_us < 100_000, `a call took ${rows[0]!.time_us} us`);
});

test("tp-exchange runs tensor parallel's exchange between rank processes as the nodes do, and closes it", async () => {
  // shm nodes connect the direct exchange; tcp nodes sum through the communicator (3 ranks: gather, then the sum)
  for (const [provider, ranks, algorithm] of [
    ['shm', 2, 'auto:direct'],
    ['tcp', 3, 'auto:gather-sum'],
  ] as const) {
    const rows = await runCollectivesBench(
      { op: 'tp-exchange', ranks, provider, sizes: [4096, 1 << 16], iterations: 20 },
      () => {},
    );
    assert.deepEqual(
      rows.map((r) => [r.bytes, r.algorithm]),
      [
        [4096, algorithm],
        [1 << 16, algorithm],
      ],
    );
    for (const r of rows) assert.ok(r.time_us > 0 && r.busbw_GBps > 0, JSON.stringify(r));
  }
});
