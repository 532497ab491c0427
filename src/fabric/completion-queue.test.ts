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

test('pollOne takes the oldest completion, one a call, in order with poll(); undefined when none', () => {
  let progressed = 0;
  const engine: ProgressEngine = { spins: true, progress: () => (progressed++, false) };
  const cq = new CQ(engine, 16);
  const wc = (wrId: number) => ({
    wrId,
    status: 'success' as const,
    opcode: 'recv' as const,
    byteLen: 0,
    qpNum: 1,
  });
  assert.equal(cq.pollOne(), undefined);
  for (let i = 1; i <= 3; i++) cq.push(wc(i));
  assert.equal(cq.pollOne()?.wrId, 1);
  cq.push(wc(4));
  assert.deepEqual(
    cq.poll(2).map((w) => w.wrId),
    [2, 3],
  );
  assert.equal(cq.size, 1);
  assert.equal(cq.pollOne()?.wrId, 4);
  assert.equal(cq.pollOne(), undefined);
  assert.equal(cq.size, 0);
  // the slots are reused once emptied: a long run of single completions keeps the order
  for (let i = 0; i < 100; i++) {
    cq.push(wc(i));
    cq.push(wc(i + 1000));
    assert.equal(cq.pollOne()?.wrId, i);
    assert.equal(cq.pollOne()?.wrId, i + 1000);
  }
  assert.ok(progressed >= 205, 'every pollOne drives progress once');
});
