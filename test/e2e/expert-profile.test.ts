import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runTandem, tempModel } from '../../src/cli/testing.js';
import { EXPERT_PROFILE_FORMAT, readExpertProfile } from '../../src/parallel/index.js';

/*
 * --save-expert-profile writes a run's routing per layer (one node's counters, or the nodes'
 * merged); --expert-profile places each layer's experts by it on the next run, whose greedy
 * tokens stay one node's.
 */

const path = tempModel('tandem-expert-profile-', {
  arch: 'qwen3moe',
  shape: 'tiny',
  type: 'q8_0',
  seed: 9,
  experts: 8,
  expertsUsed: 2,
  routerSkew: { kind: 'zipf', s: 1.5 },
});
const ids = Array.from({ length: 20 }, (_, i) => 3 + ((i * 53) % 300)).join(',');
const common = ['--prompt-tokens', ids, '--temperature', '0', '--max-tokens', '6', '--json'];

test('run --save-expert-profile on one node, then --nodes 3 --parallel ep --expert-profile: each layer placed by it, the same tokens, the same routing', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-expert-profile-run-'));
  try {
    const one = runTandem(['run', path(), ...common, '--save-expert-profile', join(dir, 'one.json')]);
    assert.equal(one.code, 0, one.stderr);
    const profile = readExpertProfile(join(dir, 'one.json'), { experts: 8, layers: 2 });
    assert.ok(profile.layers[0]![0]! > 0.2, `expert 0 is hot: ${profile.layers[0]!.join(' ')}`);
    const many = runTandem([
      'run',
      path(),
      ...common,
      '--nodes',
      '3',
      '--parallel',
      'ep',
      '--expert-profile',
      join(dir, 'one.json'),
      '--save-expert-profile',
      join(dir, 'nodes.json'),
    ]);
    assert.equal(many.code, 0, many.stderr);
    const tokens = (r: { stdout: string }): number[] => (JSON.parse(r.stdout) as { tokens: number[] }).tokens;
    assert.deepEqual(tokens(many), tokens(one));
    const merged = readExpertProfile(join(dir, 'nodes.json'), { experts: 8, layers: 2 });
    assert.deepEqual(merged.choices, profile.choices, 'the nodes routed the same choices');
    merged.layers.forEach((l, layer) =>
      l.forEach((share, e) =>
        assert.ok(Math.abs(share - profile.layers[layer]![e]!) < 1e-2, `${layer}/${e}`),
      ),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('run --expert-profile or serve --rebalance-experts without nodes, or a profile of another model, says what to do', () => {
  const r = runTandem(['run', path(), ...common, '--expert-profile', '/nonexistent.json']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /--expert-profile applies only with --nodes or --hosts/);
  const serve = runTandem(['serve', path(), '--port', '0', '--rebalance-experts', '30']);
  assert.notEqual(serve.code, 0);
  assert.match(
    serve.stderr,
    /--expert-profile and --rebalance-experts apply only with --nodes, --hosts or --cluster/,
  );
  const dir = mkdtempSync(join(tmpdir(), 'tandem-expert-profile-bad-'));
  try {
    const bad = join(dir, 'other.json');
    writeFileSync(
      bad,
      JSON.stringify({
        format: EXPERT_PROFILE_FORMAT,
        experts: 4,
        window: 'recent',
        layers: [[1, 0, 0, 0]],
        choices: [1],
      }),
    );
    const other = runTandem([
      'run',
      path(),
      ...common,
      '--nodes',
      '2',
      '--parallel',
      'ep',
      '--expert-profile',
      bad,
    ]);
    assert.notEqual(other.code, 0);
    assert.match(other.stderr, /covers 1 layers of 4 experts; the model has 2 layers of 8/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
