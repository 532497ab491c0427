import { test } from 'node:test';
import assert from 'node:assert/strict';
import { whySplitMayNotPay } from './split-verdict.js';

const base = {
  speedup: 0.42,
  nodes: 2,
  commShare: 0.1,
  local: true,
  threadsPerNode: 1,
  cores: 8,
  modelBytes: 2 * 1024 ** 3,
  repeat: 3,
};

test('a split that paid needs no explanation', () => {
  assert.equal(whySplitMayNotPay({ ...base, speedup: 1.4 }), undefined);
  assert.equal(whySplitMayNotPay({ ...base, speedup: 1 }), undefined);
});

test('a slower split is explained in one line by what the facts show', () => {
  const shared = whySplitMayNotPay({ ...base, cores: 2 }) ?? '';
  assert.match(shared, /^why the split is slower here \(0\.42x\): /);
  assert.match(shared, /3 threads on 2 core\(s\) of one machine/);
  assert.doesNotMatch(shared, /\n/);
  const small = whySplitMayNotPay({ ...base, modelBytes: 8 * 1024 ** 2, commShare: 0.6 }) ?? '';
  assert.match(
    small,
    /model \(8 MiB\) is too small for a split to pay: 60% of each token goes to communication/,
  );
  const cold = whySplitMayNotPay({ ...base, local: false, repeat: 1 }) ?? '';
  assert.match(cold, /1 timed round\(s\) may still include cold nodes/);
  assert.doesNotMatch(cold, /local nodes|core/);
  const drift = whySplitMayNotPay({ ...base, local: false }) ?? '';
  assert.match(drift, /busy or its speed drifted/);
});
