import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { runTandem, tempModel } from '../src/cli/testing.js';
import { makeModel } from '../src/engine/format/make-model.js';
import { modelShapes, type ModelShape } from '../src/engine/format/model-plan.js';
import { CpuCap } from './cpu-cap.js';

const path = tempModel('tandem-bench-join-', { arch: 'llama', shape: 'tiny', type: 'q8_0', seed: 1 });

test('bench recover --join --json: a member joins mid-stream; the verdict is reported and every stream completes with its text', () => {
  const r = runTandem(
    [
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
    ],
    { timeoutMs: 240_000 },
  );
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

const noCap = CpuCap.unavailable();
let deep = '';
before(async () => {
  if (noCap) return;
  deep = join(mkdtempSync(join(tmpdir(), 'tandem-bench-join-deep-')), 'deep12.gguf');
  // 12 layers, so a pipeline can hand a member few of them; 45 MB in Q8_0
  await makeModel(deep, {
    arch: 'llama',
    shape: { ...(modelShapes.small as ModelShape), layers: 12, vocab: 4096, context: 512 },
    type: 'q8_0',
    std: 0.3,
    seed: 5,
  });
});
after(() => {
  if (deep) rmSync(dirname(deep), { recursive: true, force: true });
});

test(
  'bench recover --join: a slow member made to hold half the model; a third member takes most of its layers (re-plan), every stream completes with its text',
  { skip: noCap, timeout: 420_000 },
  () => {
    const r = runTandem(
      [
        'bench',
        'recover',
        deep,
        '--join',
        '--parallel',
        'pp',
        '--slow-member',
        '0.04',
        '--member-mem',
        '30M',
        '--streams',
        '2',
        '--prompt-tokens',
        '8',
        '--max-tokens',
        '32',
        '--threads',
        '1',
        '--json',
      ],
      { timeoutMs: 400_000 },
    );
    assert.equal(r.code, 0, r.stderr);
    const row = JSON.parse(r.stdout.trim()) as Record<string, number | boolean | string>;
    assert.match(String(row.verdict), /^re-plan at the next step: predicted decode/);
    assert.equal(row.replanned, true);
    assert.equal(row.members_after, 3);
    assert.equal(row.streams_completed, 2);
    assert.equal(row.texts_equal, true);
  },
);
