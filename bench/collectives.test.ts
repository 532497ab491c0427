import { test } from 'node:test';
import assert from 'node:assert/strict';
import { anchorFor, busFactor, DEFAULT_SIZES, formatRow, parseSize, toRow } from './collectives.js';

test('nccl-tests bus factors and row arithmetic', () => {
  assert.equal(busFactor('all-reduce', 4), 1.5);
  assert.equal(busFactor('all-gather', 4), 0.75);
  assert.equal(busFactor('broadcast', 8), 1);
  const r = toRow('all-reduce', 2, 'shm', 'ring', 1 << 20, 100);
  assert.equal(r.algbw_GBps, 10.486);
  assert.equal(r.busbw_GBps, 10.486);
  assert.deepEqual(Object.keys(r), [
    'op',
    'ranks',
    'provider',
    'algorithm',
    'bytes',
    'time_us',
    'algbw_GBps',
    'busbw_GBps',
  ]);
  const withP50 = toRow('all-reduce', 2, 'shm', 'mesh', 8, 30.5, 12.25);
  assert.equal(withP50.p50_us, 12.25);
  assert.match(formatRow(withP50), /30\.50 .* 12\.25$/);
  assert.match(formatRow(r), / -$/);
  assert.equal(DEFAULT_SIZES[0], 8);
  assert.equal(DEFAULT_SIZES.at(-1), 64 << 20);
  const anchors = [
    { anchor: 'openmpi-allreduce', btl: 'vader,self', ranks: 2, bytes: 1 << 20, time_us: 61, busbw_GBps: 17 },
  ];
  assert.equal(anchorFor(anchors, r)?.time_us, 61);
  assert.equal(anchorFor(anchors, { ...r, provider: 'tcp' }), undefined);
  assert.match(formatRow(r, anchors[0]), /61\.00/);
  assert.deepEqual(['8', '4K', '1MiB', '64M'].map(parseSize), [8, 4096, 1 << 20, 64 << 20]);
  assert.throws(() => parseSize('2T'), /cannot read size/);
});
