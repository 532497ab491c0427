import { Worker } from 'node:worker_threads';

/** Exchanges timed per measurement. */
const ROUNDS = 100;
/** A rank's window of busy-polling before it sleeps at an exchange: the fabric's (src/fabric/spin-policy.ts). */
const SPIN_MS = 0.2;

/**
 * One rank: `rounds` times, a fixed amount of arithmetic (calibrated once, at its fastest, to
 * take `chunkMs`: a rank preempted mid-chunk finishes late, as a node computing its share of a
 * layer does), then the exchange: it counts itself in on word 0; the last to arrive stamps the
 * time and releases the round on word 1; the others poll for SPIN_MS and then sleep on word 1
 * (Atomics.wait, the futex a node's fabric wait sleeps on). Each rank adds up the time from
 * its arrival to its leaving, and answers with the sum on its slot.
 */
const RANK = `
const { workerData } = require('node:worker_threads');
const { shared, rank, ranks, rounds, chunkMs, spinMs } = workerData;
const i32 = new Int32Array(shared, 0, 4);
const f64 = new Float64Array(shared, 16);
const buf = new Float64Array(4096).fill(1.5);
let sink = 0;
const work = (reps) => { for (let r = 0; r < reps; r++) for (let i = 0; i < buf.length; i++) sink += buf[i] * 1.0000001; };
let per = Infinity;
for (let t = 0; t < 5; t++) { const t0 = performance.now(); work(4); per = Math.min(per, (performance.now() - t0) / 4); }
const reps = Math.max(1, Math.round(chunkMs / Math.max(per, 1e-4)));
Atomics.add(i32, 2, 1);
while (Atomics.load(i32, 3) === 0) Atomics.wait(i32, 3, 0, 50);
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
 * of `chunkMs` and then waits for the others (polling the fabric's spin window, then asleep),
 * ROUNDS times; the mean time from a rank's arrival to its leaving. It holds the two things a
 * tensor-parallel all-reduce adds to a step: the wait for the latest rank (a rank preempted
 * mid-chunk arrives late, and any rank's preemption stalls all) and the wake-up of a rank that
 * slept. On idle cores, one per rank, it is microseconds; on a loaded host, milliseconds.
 */
export async function measureExchangeMs(o: { ranks: number; chunkMs: number }): Promise<number> {
  if (o.ranks < 2) return 0;
  const shared = new SharedArrayBuffer(16 + 8 * (o.ranks + 1));
  const i32 = new Int32Array(shared, 0, 4);
  const f64 = new Float64Array(shared, 16);
  const workers = Array.from(
    { length: o.ranks },
    (_, rank) =>
      new Worker(RANK, {
        eval: true,
        workerData: { shared, rank, ranks: o.ranks, rounds: ROUNDS, chunkMs: o.chunkMs, spinMs: SPIN_MS },
      }),
  );
  try {
    const settled = async (count: number): Promise<void> => {
      const deadline = Date.now() + 60_000;
      while (Atomics.load(i32, 2) < count && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 1));
    };
    await settled(o.ranks);
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
