import { test } from 'node:test';
import assert from 'node:assert/strict';
import { benchTrain, trainTable } from './train.js';

test(
  'bench train measures 1 and 2 data-parallel nodes and reports the issue fields',
  { timeout: 120_000 },
  async () => {
    const rows = await benchTrain({
      shape: 'micro',
      nodes: [1, 2],
      batch: 2,
      seq: 8,
      steps: 2,
      rounds: 1,
      noTorch: true,
    });
    assert.deepEqual(
      rows.map((r) => r.nodes),
      [1, 2],
    );
    for (const r of rows) {
      for (const k of ['nodes', 'step_ms', 'tokens_per_s', 'comm_share', 'overlap']) assert.ok(k in r, k);
      assert.ok(r.step_ms > 0 && r.tokens_per_s > 0 && r.cpu_ms > 0);
      assert.ok(r.comm_share >= 0 && r.comm_share <= 1 && r.overlap >= 0 && r.overlap <= 1);
    }
    assert.equal(rows[0]!.comm_share, 0);
    assert.match(trainTable(rows), /^nodes\s+step ms/);
  },
);
