import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const bin = resolve(import.meta.dirname, '..', '..', '..', 'bin', 'tandem.js');

function tandem(args: string[]): { status: number | null; stdout: string; stderr: string } {
  return spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', timeout: 100_000 });
}

const TEXT = Array.from(
  { length: 40 },
  (_, i) => `Line ${i % 7}: the quick brown fox jumps over the lazy dog, and the cat sleeps in the sun.\n`,
).join('');

function lines(stdout: string): Record<string, unknown>[] {
  return stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

test(
  'tandem train --json: a line per update, a summary, and a GGUF that tandem run loads',
  { timeout: 120_000 },
  () => {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-cli-train-'));
    try {
      const data = join(dir, 'data.txt');
      writeFileSync(data, TEXT);
      const out = join(dir, 'm.gguf');
      const common = [
        '--data',
        data,
        '--model-shape',
        'micro',
        '--steps',
        '5',
        '--batch',
        '2',
        '--seq',
        '16',
      ];
      const r = tandem([
        'train',
        ...common,
        '--out',
        out,
        '--json',
        '--curve',
        join(dir, 'curve.csv'),
        '--plot',
        join(dir, 'curve.svg'),
      ]);
      assert.equal(r.status, 0, r.stderr);
      const all = lines(r.stdout);
      assert.equal(all.length, 6);
      for (const [i, l] of all.slice(0, 5).entries()) {
        assert.deepEqual(Object.keys(l), ['step', 'loss', 'lr', 'tokens_per_s']);
        assert.equal(l.step, i + 1);
      }
      assert.deepEqual(all[5], { out, steps: 5, final_loss: all[4]!.loss });
      assert.ok(existsSync(`${out}.ckpt`));
      const svg = readFileSync(join(dir, 'curve.svg'), 'utf8');
      assert.match(svg, /^<svg /);
      assert.match(svg, /class="mark-line role-mark/);
      const csv = readFileSync(join(dir, 'curve.csv'), 'utf8').trim().split('\n');
      assert.equal(csv[0], 'step,loss,lr');
      assert.deepEqual(
        csv.slice(1).map((row) => Number(row.split(',')[1])),
        all.slice(0, 5).map((l) => l.loss),
      );
      const run = tandem([
        'run',
        out,
        '--prompt',
        'the quick',
        '--max-tokens',
        '4',
        '--json',
        '--threads',
        '1',
      ]);
      assert.equal(run.status, 0, run.stderr);

      // stopped after 2 updates, then resumed: the same curve bit for bit (JSON prints doubles exactly)
      const out2 = join(dir, 'm2.gguf');
      const first = tandem(['train', ...common, '--out', out2, '--json', '--stop-after', '2']);
      assert.equal(first.status, 0, first.stderr);
      assert.equal(lines(first.stdout).at(-1)?.out, null);
      assert.ok(!existsSync(out2));
      const rest = tandem(['train', '--data', data, '--resume', `${out2}.ckpt`, '--out', out2, '--json']);
      assert.equal(rest.status, 0, rest.stderr);
      const curve = [...lines(first.stdout).slice(0, 2), ...lines(rest.stdout).slice(0, 3)].map(
        (l) => l.loss,
      );
      assert.deepEqual(
        curve,
        all.slice(0, 5).map((l) => l.loss),
      );
      assert.ok(existsSync(out2));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

test('tandem train refuses bad input with typed errors', { timeout: 60_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-cli-train-'));
  try {
    const data = join(dir, 'data.txt');
    writeFileSync(data, TEXT);
    const missing = tandem(['train', '--data', join(dir, 'none.txt'), '--model-shape', 'micro']);
    assert.notEqual(missing.status, 0);
    assert.match(missing.stderr, /TRAIN_DATA/);
    const seq = tandem(['train', '--data', data, '--model-shape', 'micro', '--seq', '4096']);
    assert.notEqual(seq.status, 0);
    assert.match(seq.stderr, /--seq must be an integer in 1\.\.128/);
    const other = join(dir, 'other.txt');
    writeFileSync(other, TEXT.toUpperCase());
    const ckpt = join(dir, 'c.ckpt');
    const ok = tandem([
      'train',
      '--data',
      data,
      '--model-shape',
      'micro',
      '--steps',
      '2',
      '--batch',
      '1',
      '--seq',
      '8',
      '--checkpoint',
      ckpt,
      '--stop-after',
      '1',
      '--json',
    ]);
    assert.equal(ok.status, 0, ok.stderr);
    const wrong = tandem(['train', '--data', other, '--resume', ckpt]);
    assert.notEqual(wrong.status, 0);
    assert.match(wrong.stderr, /TRAIN_CHECKPOINT/);
    assert.match(wrong.stderr, /other data/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
