import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runTandem, tempModel } from '../src/cli/testing.js';

const path = tempModel('tandem-bench-join-', { arch: 'llama', shape: 'tiny', type: 'q8_0', seed: 1 });

test('bench recover --join --json: a member joins mid-stream; the verdict is reported and every stream completes with its text', () => {
  const r = runTandem([
    'bench',
    'recover',
    path(),
    '--join',
    '--streams',
    '2',
    '--prompt-tokens',
    '8',
    '--max-tokens',
    '24',
    '--threads',
    '1',
    '--json',
  ]);
  assert.equal(r.code, 0, r.stderr);
  const row = JSON.parse(r.stdout.trim()) as Record<string, number | boolean | string>;
  assert.deepEqual(Object.keys(row), [
    'members_before',
    'members_after',
    'replanned',
    'verdict',
    'tok_s_before',
    'tok_s_after',
    'replan_ms',
    'pause_ms',
    'streams',
    'streams_completed',
    'texts_equal',
  ]);
  assert.equal(row.members_before, 2);
  // the tiny model's weights read in microseconds: a third member is predicted not to pay
  assert.match(String(row.verdict), /^no re-plan: predicted decode/);
  assert.equal(row.replanned, false);
  assert.equal(row.members_after, 2);
  assert.equal(row.streams_completed, 2);
  assert.equal(row.texts_equal, true);
});
