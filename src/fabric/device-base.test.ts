import { test } from 'node:test';
import assert from 'node:assert/strict';
import { withDeadline } from './device-base.js';

test('withDeadline on a signal aborted before the call: ABORTED, and the work failing later is still handled', async () => {
  const unhandled: unknown[] = [];
  const onUnhandled = (e: unknown): void => void unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  try {
    let fail: (e: Error) => void = () => undefined;
    const work = new Promise<number>((_, reject) => (fail = reject));
    let gaveUp = 0;
    const signal = AbortSignal.abort();
    await assert.rejects(
      withDeadline(work, 10_000, signal, 'a connect', () => gaveUp++),
      (e: { code?: string }) => e.code === 'ABORTED',
    );
    assert.equal(gaveUp, 1);
    fail(new Error('ECONNREFUSED'));
    await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(unhandled, []);
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
});

test('withDeadline: the work wins, or the deadline names what did not finish', async () => {
  assert.equal(await withDeadline(Promise.resolve(7), 1000, undefined, 'x'), 7);
  await assert.rejects(
    withDeadline(new Promise(() => undefined), 20, undefined, 'an accept'),
    (e: { code?: string; message: string }) =>
      e.code === 'FABRIC_WAIT_TIMEOUT' && /an accept did not finish within 20 ms/.test(e.message),
  );
});
