import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const bin = resolve(import.meta.dirname, '..', '..', '..', 'bin', 'tandem.js');

test('tandem make-model writes a file and says its weights are random', { timeout: 120_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-cli-mm-'));
  try {
    const out = join(dir, 'm.gguf');
    const text = spawnSync(
      process.execPath,
      [bin, 'make-model', out, '--arch', 'qwen3', '--type', 'q8_0', '--threads', '1'],
      { encoding: 'utf8', timeout: 100_000 },
    );
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stderr, /RANDOM WEIGHTS/);
    assert.match(text.stdout, /weights are RANDOM/);
    const json = spawnSync(
      process.execPath,
      [bin, 'make-model', out, '--type', 'f16', '--json', '--threads', '2'],
      { encoding: 'utf8', timeout: 100_000 },
    );
    assert.equal(json.status, 0, json.stderr);
    const summary = JSON.parse(json.stdout) as Record<string, unknown>;
    assert.equal(summary.randomWeights, true);
    assert.equal(summary.bytes, statSync(out).size);
    assert.equal(summary.type, 'f16');
    const bad = spawnSync(
      process.execPath,
      [bin, 'make-model', out, '--arch', 'qwen2', '--rope-scaling', 'llama3'],
      { encoding: 'utf8', timeout: 100_000 },
    );
    assert.equal(bad.status, 2, bad.stderr);
    assert.match(bad.stderr, /MODEL_FORMAT_UNSUPPORTED/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
