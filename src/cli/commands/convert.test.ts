import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { makeModel } from '../../engine/format/make-model.js';
import { writeHfFolder } from '../../engine/testing/hf-folder.js';

const bin = resolve(import.meta.dirname, '..', '..', '..', 'bin', 'tandem.js');
const tandem = (...args: string[]) =>
  spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', timeout: 100_000 });

test(
  'tandem convert writes an MLX folder as GGUF, and run gives the same tokens from both',
  { timeout: 300_000 },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-cli-convert-'));
    try {
      await makeModel(join(dir, 'm.gguf'), { arch: 'qwen3', shape: 'tiny', type: 'f32' });
      const folder = join(dir, 'mlx');
      writeHfFolder(join(dir, 'm.gguf'), folder, { dtype: 'BF16', mlx: { bits: 8, groupSize: 32 } });
      const out = join(dir, 'out.gguf');
      const converted = tandem('convert', folder, out, '--json');
      assert.equal(converted.status, 0, converted.stderr);
      const summary = JSON.parse(converted.stdout) as { bytes: number; arch: string };
      assert.deepEqual([summary.arch, summary.bytes], ['qwen3', statSync(out).size]);

      const run = (model: string) => {
        const r = tandem(
          'run',
          model,
          '--prompt',
          'Once upon a time',
          '--max-tokens',
          '6',
          '--temperature',
          '0',
          '--json',
          '--threads',
          '1',
        );
        assert.equal(r.status, 0, r.stderr);
        return (JSON.parse(r.stdout) as { tokens: number[] }).tokens;
      };
      assert.deepEqual(run(folder), run(out));

      const missing = tandem('convert', join(dir, 'nope'), out);
      assert.equal(missing.status, 2);
      assert.match(missing.stderr, /MODEL_FOLDER_INCOMPLETE.*does not exist/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
