import { test } from 'node:test';
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { runTandem, tempModel } from '../src/cli/testing.js';
import { sharedCoresNote } from './moe.js';

const path = tempModel('tandem-bench-moe-', {
  arch: 'qwen3moe',
  shape: 'tiny',
  type: 'q8_0',
  seed: 3,
  experts: 8,
  expertsUsed: 2,
  routerSkew: { kind: 'zipf', s: 1.5 },
});

test('bench moe --json: placed by load, the hot expert is copied, the busiest node does less, and both placements give one node tokens', () => {
  const r = runTandem([
    'bench',
    'moe',
    path(),
    '--nodes',
    '3',
    '--prompt-tokens',
    '32',
    '--tokens',
    '4',
    '--repeat',
    '1',
    '--json',
  ]);
  assert.equal(r.code, 0, r.stderr);
  if (availableParallelism() < 3) assert.match(r.stderr, /the 3 nodes share \d+ core\(s\) here/);
  const rows = r.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.deepEqual(
    rows.map((x) => x.balance),
    ['static', 'dynamic'],
  );
  for (const row of rows) {
    assert.deepEqual(Object.keys(row), [
      'balance',
      'nodes',
      'decode_tok_s',
      'prefill_tok_s',
      'max_node_share',
      'expert_cpu_max_share',
      'replicas',
      'same_tokens',
    ]);
    assert.equal(row.same_tokens, true, `${row.balance}: tokens differ from one node`);
    // the busiest node's measured expert CPU over the mean: at least 1, at most every node's share
    const measured = row.expert_cpu_max_share as number;
    assert.ok(measured >= 1 && measured <= 3, `${row.balance}: measured share ${measured}`);
  }
  const [flat, balanced] = rows as { max_node_share: number; replicas: number }[];
  assert.equal(flat!.replicas, 0);
  assert.ok(balanced!.replicas >= 1, 'the hottest expert got a copy');
  assert.ok(
    balanced!.max_node_share < flat!.max_node_share,
    `${balanced!.max_node_share} vs ${flat!.max_node_share}`,
  );
  assert.match(r.stderr, /measured routing/);
});

test('bench moe says when its nodes share cores, and only then', () => {
  assert.equal(sharedCoresNote(2, 2), undefined);
  assert.equal(sharedCoresNote(4, 8), undefined);
  const note = sharedCoresNote(4, 2);
  assert.match(note ?? '', /the 4 nodes share 2 core\(s\)/);
  assert.match(note ?? '', /--nodes 2 or fewer/);
});
