import { test } from 'node:test';
import assert from 'node:assert/strict';
import { probeProviders } from './providers.js';

test('probeProviders lists loopback, shm, tcp and rdma, each with a reason', () => {
  const rows = probeProviders();
  assert.deepEqual(
    rows.map((r) => r.provider),
    ['loopback', 'shm', 'tcp', 'rdma'],
  );
  for (const r of rows) assert.ok(r.detail.length > 10, `${r.provider} explains itself`);
  assert.equal(rows[0]?.available, true);
  assert.equal(rows[2]?.available, true);
  // this machine has no RDMA device: the row must say why rdma is unavailable
  assert.equal(rows[3]?.available, false);
});
