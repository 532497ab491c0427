import { test } from 'node:test';
import assert from 'node:assert/strict';
import { withStreamSamples } from '../src/cluster/calibrate.js';
import type { Calibration } from '../src/parallel/index.js';
import { atRange, summarize } from './plan-rounds.js';

const base: Calibration = {
  date: '2026-11-28',
  threads: 1,
  memoryBytes: 24e9,
  cpuCores: 2,
  decodeBytesPerS: 1,
  prefillFlopsPerS: 100e9,
  layerOverheadMs: 0.1,
  stepOverheadMs: 1,
  prefillLayerTokenMs: 0.01,
};

test('stream samples: the median is the rate, the slowest and fastest the range, the fast mode within 85% of the fastest', () => {
  const c = withStreamSamples(base, [10e9, 20e9, 21e9, 22e9, 11e9]);
  assert.equal(c.decodeBytesPerS, 20e9);
  assert.deepEqual(c.decodeBytesPerSRange, [10e9, 22e9]);
  assert.equal(c.fastShare, 3 / 5);
  const { low, high } = atRange(c);
  assert.equal(low.decodeBytesPerS, 10e9);
  assert.equal(high.decodeBytesPerS, 22e9);
  // the VM's mode moves every rate with the stream
  assert.equal(low.prefillFlopsPerS, 50e9);
  assert.equal(low.layerOverheadMs, 0.2);
  assert.equal(low.stepOverheadMs, 2);
});

test("rounds: the best forecast against the best run, each round's own error and modes", () => {
  const s = summarize(
    [
      { predicted: 20, low: 10, high: 22, measured: 19, probe: 20e9 },
      { predicted: 12, low: 11, high: 21, measured: 10, probe: 11e9 },
    ],
    22e9,
  );
  assert.equal(s.predicted, 20);
  assert.equal(s.measured, 19);
  assert.ok(Math.abs(s.error - (20 / 19 - 1)) < 1e-12);
  assert.equal(s.predicted_low, 10);
  assert.equal(s.predicted_high, 22);
  assert.ok(Math.abs(s.round_errors[1]! - 0.2) < 1e-12);
  assert.deepEqual(s.modes, ['fast/fast', 'slow/slow']);
  // the best run (19) lies inside the range 10-22; round 2's run (10) lies 10% below its own 11-21
  assert.equal(s.range_error, 0);
  assert.equal(s.round_range_errors[0], 0);
  assert.ok(Math.abs(s.round_range_errors[1]! - 0.1) < 1e-12);
});
