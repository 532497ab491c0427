import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_SPIN_US, SpinPolicy } from './spin-policy.js';

test('spin window: twice the recent quiet spells, within bounds', () => {
  const p = new SpinPolicy(undefined);
  for (let i = 0; i < 50; i++) p.record(10);
  assert.equal(p.windowMs(), 0.02);
  for (let i = 0; i < 50; i++) p.record(0.5);
  assert.ok(p.windowMs() > 0 && p.windowMs() <= 0.006, String(p.windowMs()));
  for (let i = 0; i < 50; i++) p.record(80);
  assert.ok(Math.abs(p.windowMs() - 0.16) < 0.001, String(p.windowMs()));
});

test('spin window: 0 when frames come too slowly to catch, with an occasional probe', () => {
  const p = new SpinPolicy(undefined);
  for (let i = 0; i < 50; i++) p.record(5000);
  const windows = Array.from({ length: 64 }, () => p.windowMs());
  const spinning = windows.filter((w) => w > 0);
  assert.equal(spinning.length, 2, 'one probe in 32 decisions');
  assert.ok(spinning.every((w) => w === MAX_SPIN_US / 1000));
  // one long sleep among short spells does not stop spinning
  const q = new SpinPolicy(undefined);
  for (let i = 0; i < 20; i++) q.record(4);
  q.record(1e6);
  assert.ok(q.windowMs() > 0);
});

test('spin window: a fixed window wins over the adaptive one', () => {
  const p = new SpinPolicy(2000);
  for (let i = 0; i < 50; i++) p.record(5000);
  assert.equal(p.windowMs(), 2);
  assert.equal(new SpinPolicy(0).windowMs(), 0);
});
