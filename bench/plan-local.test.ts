import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runTandem, tempModel } from '../src/cli/testing.js';

const path = tempModel('tandem-bench-plan-', { arch: 'llama', shape: 'tiny', type: 'q8_0', seed: 5 });

test('bench plan --nodes 2 --json: the forecast for local nodes beside bench cluster, one node and two, each figure', () => {
  const r = runTandem(
    [
      'bench',
      'plan',
      path(),
      '--nodes',
      '2',
      '--threads',
      '1',
      '--parallel',
      'tp',
      '--provider',
      'shm',
      '--rounds',
      '1',
      '--prompt-tokens',
      '16',
      '--tokens',
      '4',
      '--json',
    ],
    { timeoutMs: 300_000 },
  );
  assert.equal(r.code, 0, r.stderr);
  const rows = r.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number | string>);
  assert.deepEqual(rows.map((x) => `${x.nodes} ${x.parallel} ${x.provider} ${x.figure}`).sort(), [
    '1 tp shm decode_tok_s',
    '1 tp shm prefill_tok_s',
    '2 tp shm decode_tok_s',
    '2 tp shm prefill_tok_s',
  ]);
  for (const row of rows) {
    const { predicted, measured, error } = row as Record<string, number>;
    assert.ok(predicted! > 0 && Number.isFinite(predicted), `predicted ${predicted}`);
    assert.ok(measured! > 0 && Number.isFinite(measured), `measured ${measured}`);
    assert.ok(Math.abs(error! - (predicted! / measured! - 1)) < 1e-9);
  }
});

test('bench plan --nodes refuses what it cannot run, before starting anything', () => {
  for (const [args, what] of [
    [['--nodes', '1'], /--nodes must be an integer from 2 to 8/],
    [['--nodes', '2', '--parallel', 'ep'], /--parallel 'ep' is not one of tp, pp/],
    [['--nodes', '2', '--provider', 'rdma'], /--provider 'rdma' is not one of shm, tcp/],
  ] as const) {
    const r = runTandem(['bench', 'plan', path(), ...args]);
    assert.equal(r.code, 3, r.stderr);
    assert.match(r.stderr, what);
  }
});
