import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  anchorLines,
  bestAnchors,
  bestBenchRows,
  formatGoalTable,
  goalCheck,
  withRounds,
  type Anchors,
  type GoalCheck,
} from './bench-anchors.js';
import type { BenchRow } from './bench.js';

const lat = (p50: number, p99: number, wait: number): BenchRow => ({
  provider: 'shm',
  op: 'latency',
  bytes: 8,
  latency_us_p50: p50,
  latency_us_p99: p99,
  bandwidth_MBps: null,
  wait_latency_us_p50: wait,
  wait_latency_us_p99: wait * 2,
});
const bw = (bytes: number, mbps: number): BenchRow => ({
  provider: 'shm',
  op: 'bandwidth',
  bytes,
  latency_us_p50: null,
  latency_us_p99: null,
  bandwidth_MBps: mbps,
});

test('rounds of fabric rows keep, per op and size, the lowest latency and the highest bandwidth, each measure on its own', () => {
  const kept = bestBenchRows(bestBenchRows([], [lat(0.5, 3, 2), bw(8, 10)]), [
    lat(0.6, 2, 1),
    bw(8, 12),
    bw(64, 90),
  ]);
  assert.deepEqual(kept, [lat(0.5, 2, 1), bw(8, 12), bw(64, 90)]);
});

test('rounds of anchors keep the best figure of each anchor line, times lowest and rates highest', () => {
  const round = (latency: number, bandwidth: number): Anchors => ({
    ucxShmLatencyUs: latency,
    ucxShmBandwidthMBps: bandwidth,
    raw: [
      {
        anchor: 'ucx',
        transport: 'posix,self',
        latency_us_8B: latency,
        bandwidth_MBps_4MiB: bandwidth,
      },
    ],
  });
  const a = bestAnchors(bestAnchors(undefined, round(0.16, 30000)), round(0.15, 25000));
  assert.equal(a.ucxShmLatencyUs, 0.15);
  assert.equal(a.ucxShmBandwidthMBps, 30000);
  assert.deepEqual(a.raw, [
    { anchor: 'ucx', transport: 'posix,self', latency_us_8B: 0.15, bandwidth_MBps_4MiB: 30000 },
  ]);
  // a round whose tool produced no figure keeps the other round's
  assert.equal(bestAnchors(a, { raw: [] }).ucxShmLatencyUs, 0.15);
});

test('the goal table shows ours, the anchor, the ratio and the verdict of each goal', () => {
  const table = formatGoalTable(
    [goalCheck('shm 8 B latency <= 3x UCX posix', 0.45, 0.15, 3, true), goalCheck('x', null, 1, 1, false)],
    3,
  );
  assert.match(table, /best of 3 alternated rounds/);
  assert.match(table, /shm 8 B latency <= 3x UCX posix +0\.45 +0\.15 +3\.00 +met/);
  assert.match(table, /x +- +1 +- +n\/a/);
});

test("with rounds, each goal keeps every round's figure of ours and the anchor's, matched by name", () => {
  const goal = (ours: number | null, anchor: number): GoalCheck[] => [
    goalCheck('tcp 2-rank 1 MiB all-reduce busbw >= Open MPI', ours, anchor, 1, false),
    goalCheck('other', 1, 1, 1, false),
  ];
  const perRound = [goal(1.18, 2.22), goal(0.96, 1.2), [goalCheck('other', 1, 1, 1, false)]];
  const best = goal(1.18, 2.22);
  const [g, other] = withRounds(best, perRound);
  assert.deepEqual(g?.ours_rounds, [1.18, 0.96, null], 'a round without the goal shows null');
  assert.deepEqual(g?.anchor_rounds, [2.22, 1.2, null]);
  assert.deepEqual(other?.ours_rounds, [1, 1, 1]);
  assert.equal(g?.ratio, 0.53, 'the verdict stays the best of each');
  const table = formatGoalTable([g as GoalCheck], 3);
  assert.match(
    table,
    /busbw >= Open MPI +1\.18 +2\.22 +0\.53 +NOT met\n {2}by round: ours 1\.18, 0\.96, -; anchor 2\.22, 1\.2, -$/,
  );
  // one round: nothing to add, and the table has no by-round line
  assert.equal(withRounds(best, [goal(1.18, 2.22)])[0]?.ours_rounds, undefined);
  assert.doesNotMatch(formatGoalTable(withRounds(best, []), 1), /by round/);
});

test('an anchor script past its time is killed with everything it started', { timeout: 20_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-anchors-'));
  const pidFile = join(dir, 'child.pid');
  try {
    // a script that starts a long child in the background (as mpirun starts its ranks) and waits
    const script = `echo '{"anchor":"x","v":1}'; sleep 30 & echo $! > ${pidFile}; wait`;
    const lines = await anchorLines('', '', 1500, ['-c', script]);
    assert.deepEqual(lines, [{ anchor: 'x', v: 1 }]);
    const child = Number(readFileSync(pidFile, 'utf8'));
    const alive = (): boolean => {
      try {
        process.kill(child, 0);
        return true;
      } catch {
        return false;
      }
    };
    const deadline = Date.now() + 5000;
    while (alive() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.equal(alive(), false, "the script's background child outlived the timeout");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
