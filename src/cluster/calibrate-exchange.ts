import { Worker } from 'node:worker_threads';
import { MAX_SPIN_US } from '../fabric/spin-policy.js';

/** Exchanges timed per measurement: enough that one stall of the host moves the mean little. */
const ROUNDS = 300;
/** A rank's window of busy-polling before it sleeps at an exchange, by default: the fabric's adaptive one at most (src/fabric/spin-policy.ts). */
const SPIN_MS = MAX_SPIN_US / 1000;

/**
 * One rank: `rounds` times, a fixed stretch of reads over its own 32 MiB (memory-bound, as a
 * node streaming its share of a layer's weights is), the same on every rank as the nodes'
 * shares are (timed once, at the fastest any rank read it, to take `chunkMs`; a rank
 * preempted mid-chunk finishes late, as a node computing its share of a layer does), then the
 * exchange: it counts itself in on word 0; the last to arrive stamps the
 * time and releases the round on word 1; the others poll for SPIN_MS and then sleep on word 1
 * (Atomics.wait, the futex a node's fabric wait sleeps on). Each rank adds up the time from
 * its arrival to its leaving, and answers with the sum on its slot. The spin window is the
 * nodes' own (exchangeSpin): 2 ms where every rank has a core, the adaptive window's most where
 * they share.
 */
const RANK = `
const { workerData } = require('node:worker_threads');
const { shared, rank, ranks, rounds, chunkMs, spinMs } = workerData;
const i32 = new Int32Array(shared, 0, 4);
const f64 = new Float64Array(shared, 16);
const buf = new Float64Array(4 << 20).fill(1.5);
let sink = 0;
let at = 0;
const work = (reps) => { for (let r = 0; r < reps; r++) { let s0 = 0, s1 = 0, s2 = 0, s3 = 0; const end = at + 4096; for (let i = at; i < end; i += 4) { s0 += buf[i]; s1 += buf[i + 1]; s2 += buf[i + 2]; s3 += buf[i + 3]; } sink += s0 + s1 + s2 + s3; at = end === buf.length ? 0 : end; } };
let per = Infinity;
for (let t = 0; t < 5; t++) { const t0 = performance.now(); work(4); per = Math.min(per, (performance.now() - t0) / 4); }
f64[rank] = per;
Atomics.add(i32, 2, 1);
while (Atomics.load(i32, 3) === 0) Atomics.wait(i32, 3, 0, 50);
const reps = f64[ranks + 1];
let spent = 0;
for (let k = 1; k <= rounds; k++) {
  work(reps);
  const arrived = performance.now();
  if (Atomics.add(i32, 0, 1) + 1 === k * ranks) {
    Atomics.store(i32, 1, k);
    Atomics.notify(i32, 1);
  } else {
    const until = arrived + spinMs;
    while (Atomics.load(i32, 1) < k && performance.now() < until);
    while (Atomics.load(i32, 1) < k) Atomics.wait(i32, 1, k - 1, 10000);
  }
  spent += performance.now() - arrived;
}
f64[rank] = spent;
Atomics.add(i32, 2, 1);
f64[ranks] = sink;
`;

/**
 * What one exchange of `ranks` ranks costs beyond the link, in ms: each rank computes a chunk
 * of `chunkMs` and then waits for the others (polling for `spinMs`, default the fabric's
 * adaptive window at most, then asleep), ROUNDS times; the mean time from a rank's arrival to its leaving. It holds the two things a
 * tensor-parallel all-reduce adds to a step: the wait for the latest rank (a rank preempted
 * mid-chunk arrives late, and any rank's preemption stalls all) and the wake-up of a rank that
 * slept. On idle cores, one per rank, it is microseconds; on a loaded host, milliseconds.
 */
export async function measureExchangeMs(o: {
  ranks: number;
  chunkMs: number;
  spinMs?: number;
}): Promise<number> {
  if (o.ranks < 2) return 0;
  // f64 slots: each rank's timing (then its sum), the sink, the repetitions every rank runs
  const shared = new SharedArrayBuffer(16 + 8 * (o.ranks + 2));
  const i32 = new Int32Array(shared, 0, 4);
  const f64 = new Float64Array(shared, 16);
  const workers = Array.from(
    { length: o.ranks },
    (_, rank) =>
      new Worker(RANK, {
        eval: true,
        workerData: {
          shared,
          rank,
          ranks: o.ranks,
          rounds: ROUNDS,
          chunkMs: o.chunkMs,
          spinMs: o.spinMs ?? SPIN_MS,
        },
      }),
  );
  try {
    const settled = async (count: number): Promise<void> => {
      const deadline = Date.now() + 60_000;
      while (Atomics.load(i32, 2) < count && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 1));
    };
    await settled(o.ranks);
    const per = Math.min(...Array.from({ length: o.ranks }, (_, r) => f64[r]!));
    f64[o.ranks + 1] = Math.max(1, Math.round(o.chunkMs / Math.max(per, 1e-4)));
    Atomics.store(i32, 3, 1);
    Atomics.notify(i32, 3);
    await settled(2 * o.ranks);
    let sum = 0;
    for (let r = 0; r < o.ranks; r++) sum += f64[r]!;
    return sum / (o.ranks * ROUNDS);
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
  }
}
