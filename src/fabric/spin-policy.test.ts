import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_SPIN_US, SpinPolicy, machineOverloaded } from './spin-policy.js';

const calm = (): boolean => false;

test('spin window: twice the recent quiet spells, within bounds', () => {
  const p = new SpinPolicy(undefined, calm);
  for (let i = 0; i < 50; i++) p.record(10);
  assert.equal(p.windowMs(0), 0.02);
  for (let i = 0; i < 50; i++) p.record(0.5);
  assert.ok(p.windowMs(0) > 0 && p.windowMs(0) <= 0.006, String(p.windowMs(0)));
  for (let i = 0; i < 50; i++) p.record(80);
  assert.ok(Math.abs(p.windowMs(0) - 0.16) < 0.001, String(p.windowMs(0)));
});

test('spin window: 0 when frames come too slowly to catch, with an occasional probe', () => {
  const p = new SpinPolicy(undefined, calm);
  for (let i = 0; i < 50; i++) p.record(5000);
  const windows = Array.from({ length: 64 }, () => p.windowMs(0));
  const spinning = windows.filter((w) => w > 0);
  assert.equal(spinning.length, 2, 'one probe in 32 decisions');
  assert.ok(spinning.every((w) => w === MAX_SPIN_US / 1000));
  // one long sleep among short spells does not stop spinning
  const q = new SpinPolicy(undefined, calm);
  for (let i = 0; i < 20; i++) q.record(4);
  q.record(1e6);
  assert.ok(q.windowMs(0) > 0);
});

test('spin window: 0 on an overloaded machine; a fixed window wins over both', () => {
  const busy = new SpinPolicy(undefined, () => true);
  busy.record(1);
  assert.equal(busy.windowMs(0), 0);
  assert.equal(new SpinPolicy(2000, () => true).windowMs(0), 2);
  assert.equal(new SpinPolicy(0, calm).windowMs(0), 0);
  assert.equal(typeof machineOverloaded(performance.now()), 'boolean');
});
