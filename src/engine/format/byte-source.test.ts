import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FileSource } from './byte-source.js';
import { GgufFile } from './gguf-reader.js';

test('FileSource reads a regular file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-bs-'));
  try {
    const path = join(dir, 'f.bin');
    writeFileSync(path, Uint8Array.of(1, 2, 3, 4));
    const s = new FileSource(path);
    const into = new Uint8Array(2);
    s.readInto(1, 2, into);
    assert.deepEqual([...into], [2, 3]);
    assert.equal(s.size, 4);
    s.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a model path that is a directory, a FIFO or missing fails with MODEL_FORMAT_IO before any read', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-bs-'));
  try {
    const sub = join(dir, 'model');
    mkdirSync(sub);
    assert.throws(
      () => GgufFile.open(sub),
      (e: Error & { code?: string; hint?: string }) => {
        assert.equal(e.code, 'MODEL_FORMAT_IO');
        assert.match(e.message, /model: it is a directory, not a regular file/);
        assert.match(e.hint ?? '', /inside the directory/);
        return true;
      },
    );
    // Opening a FIFO for reading blocks until a writer appears: this test would hang without the stat check.
    const fifo = join(dir, 'pipe.gguf');
    execFileSync('mkfifo', [fifo]);
    assert.throws(() => new FileSource(fifo), {
      code: 'MODEL_FORMAT_IO',
      message: /pipe\.gguf: it is a FIFO \(named pipe\), not a regular file/,
    });
    assert.throws(() => new FileSource('/dev/null'), {
      code: 'MODEL_FORMAT_IO',
      message: /\/dev\/null: it is a device/,
    });
    assert.throws(() => new FileSource(join(dir, 'missing.gguf')), {
      code: 'MODEL_FORMAT_IO',
      message: /missing\.gguf: ENOENT/,
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
