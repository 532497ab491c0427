import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CQ, type ProgressEngine } from './completion-queue.js';

/** An engine whose blocking sleep "receives" one completion per call, as a poll(2) woken by data. */
function sleepingEngine(wokeOnData: boolean): { cq: () => CQ; sleeps: () => number } {
  const held: { cq?: CQ } = {};
  let pending = 0;
  let sleeps = 0;
  const engine: ProgressEngine = {
    spins: true,
    progress: () => {
      if (pending === 0) return false;
      for (; pending > 0; pending--)
        held.cq?.push({ wrId: 1, status: 'success', opcode: 'recv', byteLen: 0, qpNum: 1 });
      return true;
    },
    sleep: () => {
      sleeps++;
      pending++;
      return wokeOnData;
    },
  };
  const cq = new CQ(engine, 16);
  held.cq = cq;
  return { cq: () => cq, sleeps: () => sleeps };
}

test('a wait whose sleep ended on data polls at once, without an event-loop turn', async () => {
  const { cq, sleeps } = sleepingEngine(true);
  let turned = false;
  setImmediate(() => (turned = true));
  const wcs = await cq().wait({ spin: false, timeoutMs: 5000 });
  assert.equal(wcs.length, 1);
  assert.equal(sleeps(), 1);
  assert.equal(turned, false, 'the wait turned the event loop after a sleep that ended on data');
});

test('a sleep that ran out (no data said) still turns the event loop before polling again', async () => {
  const { cq } = sleepingEngine(false);
  let turned = false;
  setImmediate(() => (turned = true));
  const wcs = await cq().wait({ spin: false, timeoutMs: 5000 });
  assert.equal(wcs.length, 1);
  assert.equal(turned, true);
});

test('sleeps that keep ending on data for another queue still let the event loop turn every other slice', async () => {
  let sleeps = 0;
  const engine: ProgressEngine = {
    spins: true,
    progress: () => false,
    sleep: () => {
      sleeps++;
      return true;
    },
  };
  const cq = new CQ(engine, 16);
  // counts event-loop turns for as long as the wait runs
  let turns = 0;
  let waiting = true;
  const tick = (): void => {
    turns++;
    if (waiting) setImmediate(tick);
  };
  setImmediate(tick);
  await assert.rejects(cq.wait({ spin: false, timeoutMs: 50 }), /no 1 completion/);
  waiting = false;
  assert.ok(turns >= Math.floor(sleeps / 2) - 1, `${turns} turns for ${sleeps} sleeps`);
});
