import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { demoModel, ensureCacheDir } from './demo.js';

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
