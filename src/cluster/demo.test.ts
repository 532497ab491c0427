import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeModel } from '../engine/format/make-model.js';
import { demoModel, ensureCacheDir, runDemo } from './demo.js';

test('ensureCacheDir creates missing parents and accepts an existing directory', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-demo-'));
  try {
    const deep = join(dir, 'a', 'b', 'c');
    ensureCacheDir(deep);
    assert.ok(statSync(deep).isDirectory());
    ensureCacheDir(deep);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a cache directory that is a file, under a file, or under /proc fails with INVALID_ARGUMENT naming it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-demo-'));
  const saved = process.env.TANDEM_CACHE_DIR;
  try {
    const file = join(dir, 'file');
    writeFileSync(file, 'x');
    process.env.TANDEM_CACHE_DIR = file;
    await assert.rejects(
      demoModel(() => undefined),
      (e: Error & { code?: string; hint?: string }) => {
        assert.equal(e.code, 'INVALID_ARGUMENT');
        assert.match(
          e.message,
          /cannot use the cache directory .*file: .*file exists and is not a directory/,
        );
        assert.match(e.hint ?? '', /TANDEM_CACHE_DIR/);
        return true;
      },
    );
    assert.throws(() => ensureCacheDir(join(file, 'sub')), {
      code: 'INVALID_ARGUMENT',
      message: /file exists and is not a directory/,
    });
    // Node's recursive mkdir loops forever here; the check must fail at once.
    if (existsSync('/proc/self'))
      assert.throws(() => ensureCacheDir('/proc/tandem-test/cache'), {
        code: 'INVALID_ARGUMENT',
        message:
          /cache directory \/proc\/tandem-test\/cache: (cannot create \/proc\/tandem-test|\/proc is not writable)/,
      });
  } finally {
    if (saved === undefined) delete process.env.TANDEM_CACHE_DIR;
    else process.env.TANDEM_CACHE_DIR = saved;
    rmSync(dir, { recursive: true, force: true });
  }
});

test(
  'the demo measures as bench cluster does: both loaded and warmed up, then alternated rounds, the best of each',
  { timeout: 180_000 },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-demo-run-'));
    try {
      const path = join(dir, 'model.gguf');
      await makeModel(path, { arch: 'llama', shape: 'tiny', type: 'f32', seed: 2 });
      const lines: string[] = [];
      const { runs } = await runDemo(path, {
        prompt: 'The capital of France is',
        maxTokens: 4,
        provider: 'shm',
        threads: 1,
        repeat: 2,
        onProgress: (l) => lines.push(l),
      });
      const first = lines.findIndex((l) => l.startsWith('round 1 of 2'));
      assert.ok(first > 0, lines.join('\n'));
      const before = lines.slice(0, first);
      assert.equal(before.filter((l) => l.startsWith('loading')).length, 2, lines.join('\n'));
      assert.equal(before.filter((l) => l.startsWith('warming up')).length, 2, lines.join('\n'));
      assert.ok(
        lines.some((l) => l.startsWith('round 2 of 2: 4 tokens on 1 node, then on 2')),
        lines.join('\n'),
      );
      assert.deepEqual(
        runs.map((r) => r.nodes),
        [1, 2],
      );
      for (const r of runs) {
        assert.equal(r.tokens.length, 4);
        assert.ok(r.decodeTokS > 0 && r.ttftMs > 0);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
