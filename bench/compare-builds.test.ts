import { test } from 'node:test';
import assert from 'node:assert/strict';
import { bestOf, compare, measureDirection } from './compare-builds.js';

test('measures are told from row identity by name', () => {
  assert.equal(measureDirection('latency_us_p50'), 'lower');
  assert.equal(measureDirection('time_us'), 'lower');
  assert.equal(measureDirection('ttft_ms'), 'lower');
  assert.equal(measureDirection('busbw_GBps'), 'higher');
  assert.equal(measureDirection('bandwidth_MBps'), 'higher');
  assert.equal(measureDirection('decode_tok_s'), 'higher');
  assert.equal(measureDirection('bytes'), undefined);
  assert.equal(measureDirection('provider'), undefined);
});

test('each build keeps its best round per row, and the ratio says which is faster', () => {
  const row = (bytes: number, time: number, bw: number, share: number) => ({
    op: 'all-reduce',
    provider: 'shm',
    bytes,
    time_us: time,
    busbw_GBps: bw,
    comm_share: share,
  });
  const before = bestOf([
    [row(8, 0.5, 0, 0.1), row(1024, 2, 1, 0.2)],
    [row(8, 0.4, 0, 0.3), row(1024, 3, 2, 0.4)],
  ]);
  const after = bestOf([[row(8, 0.8, 0, 0.5)], [row(8, 0.2, 0, 0.6), row(1024, 4, 4, 0.7)]]);
  const byKey = new Map(compare(before, after).map((c) => [`${c.row}|${c.measure}`, c]));
  const small = byKey.get('op=all-reduce provider=shm bytes=8|time_us');
  assert.deepEqual(small && [small.before, small.after, small.speedup], [0.4, 0.2, 2]);
  const big = byKey.get('op=all-reduce provider=shm bytes=1024|busbw_GBps');
  assert.deepEqual(big && [big.before, big.after, big.speedup], [2, 4, 2]);
  const bigTime = byKey.get('op=all-reduce provider=shm bytes=1024|time_us');
  assert.deepEqual(bigTime && [bigTime.before, bigTime.after, bigTime.speedup], [2, 4, 0.5]);
  // A number that is neither identity nor measure (a share) splits no rows and is not compared.
  assert.equal(byKey.size, 4);
});
