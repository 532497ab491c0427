import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runTandem, tempModel } from '../src/cli/testing.js';
import { exitCodeFor } from '../src/errors/index.js';

const path = tempModel('tandem-bench-recover-', { arch: 'llama', shape: 'tiny', type: 'q8_0', seed: 1 });

test('bench recover --json: a member killed mid-stream is detected, the model re-placed, every stream completes with its text', () => {
  const r = runTandem([
    'bench',
    'recover',
    path(),
    '--members',
    '2',
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
  const row = JSON.parse(r.stdout.trim()) as Record<string, number | boolean>;
  assert.deepEqual(Object.keys(row), [
    'detect_ms',
    'replace_ms',
    'resume_ms',
    'streams',
    'streams_completed',
    'texts_equal',
  ]);
  assert.equal(row.streams, 2);
  assert.equal(row.streams_completed, 2);
  assert.equal(row.texts_equal, true);
  // the order of events, not their speed: detected, then re-placed, then a token on the survivor
  const { detect_ms, replace_ms, resume_ms } = row as Record<string, number>;
  assert.ok(detect_ms! >= 0 && replace_ms! >= detect_ms! && resume_ms! >= replace_ms!, JSON.stringify(row));
});

test('bench recover refuses one member: none would survive the kill', () => {
  const r = runTandem(['bench', 'recover', path(), '--members', '1']);
  assert.equal(r.code, exitCodeFor('invalid_usage'), r.stderr);
  assert.match(r.stderr, /--members must be an integer in 2\.\.64, got 1/);
});
