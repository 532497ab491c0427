import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { BenchClusterRow } from '../../cluster/index.js';
import { clusterTable } from './bench-cluster.js';

const row = (nodes: number, extra: Partial<BenchClusterRow> = {}): BenchClusterRow => ({
  nodes,
  parallel: 'tp',
  provider: 'shm',
  wire: 'f32',
  prefill_tok_s: 100,
  decode_tok_s: 10 * nodes,
  ttft_ms: 500 / nodes,
  comm_share: nodes > 1 ? 0.1 : 0,
  wire_bytes_per_token: nodes > 1 ? 360456 : 0,
  speedup_decode: nodes,
  speedup_ttft: nodes,
  ...extra,
});

test("the bench cluster table says whether each split generated one node's tokens", () => {
  const lines = clusterTable([row(1), row(2, { same_tokens: true }), row(3, { same_tokens: false })])
    .trimEnd()
    .split('\n');
  const head = lines[0]!.trim().split(/\s{2,}/);
  const column = head.indexOf('same tokens');
  assert.ok(column > 0, lines[0]);
  const cells = lines.slice(1).map((l) => l.trim().split(/\s{2,}/)[column]);
  assert.deepEqual(cells, ['-', 'yes', 'no']);
});

test('the bench cluster table shows J/token beside decode tok/s where it was measured', () => {
  const lines = clusterTable([row(1, { j_per_token: 0.4 }), row(2)])
    .trimEnd()
    .split('\n');
  const head = lines[0]!.trim().split(/\s{2,}/);
  const column = head.indexOf('J/token');
  assert.equal(head[column - 1], 'decode tok/s');
  assert.deepEqual(
    lines.slice(1).map((l) => l.trim().split(/\s{2,}/)[column]),
    ['0.400', '-'],
  );
});
