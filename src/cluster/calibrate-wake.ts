import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';

/** Wake-ups timed, and how long the waiter sleeps before each (longer than any spin window). */
const WAKES = 24;
const ASLEEP_MS = 5;

/**
 * The waiter: sleeps on word 0 (Atomics.wait, the futex a node's fabric wait also sleeps on),
 * and on each wake-up records when it ran (performance.timeOrigin + now, ms) and answers on
 * word 1.
 */
const WAITER = `
const { workerData } = require('node:worker_threads');
const i32 = new Int32Array(workerData);
const at = new Float64Array(workerData, 16, 1);
for (let k = 1; k <= ${WAKES}; k++) {
  while (Atomics.load(i32, 0) < k) Atomics.wait(i32, 0, k - 1, 10000);
  at[0] = performance.timeOrigin + performance.now();
  Atomics.store(i32, 1, k);
}
`;

/**
 * The mean time from waking a sleeping thread to its running, in ms: what a hand-off costs
 * beyond the message when the receiver slept while the sender computed (a pipeline's stages
 * take turns, so each hand-off and the token's broadcast wake one). On a quiet machine it is
 * tens of microseconds; where the cores are oversubscribed the woken thread waits for one,
 * and the mean (stalls included, as a decode's rate is a mean) is what a step pays.
 */
export async function measureWakeMs(): Promise<number> {
  const shared = new SharedArrayBuffer(32);
  const i32 = new Int32Array(shared);
  const at = new Float64Array(shared, 16, 1);
  const worker = new Worker(WAITER, { eval: true, workerData: shared });
  try {
    let sum = 0;
    for (let k = 1; k <= WAKES; k++) {
      await new Promise((resolve) => setTimeout(resolve, ASLEEP_MS));
      const sent = performance.timeOrigin + performance.now();
      Atomics.store(i32, 0, k);
      Atomics.notify(i32, 0);
      const deadline = performance.now() + 10_000;
      while (Atomics.load(i32, 1) < k && performance.now() < deadline) await Promise.resolve();
      sum += Math.max(0, at[0]! - sent);
    }
    return sum / WAKES;
  } finally {
    await worker.terminate();
  }
}
