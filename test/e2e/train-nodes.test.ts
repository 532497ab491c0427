import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { loadCheckpoint } from '../../src/engine/train/index.js';

const bin = resolve(import.meta.dirname, '..', '..', 'bin', 'tandem.js');
const TEXT = Array.from(
  { length: 60 },
  (_, i) => `Row ${i % 9}: a lazy dog and a quick brown fox meet at noon.\n`,
).join('');

/** The rank processes rank 0 started (tsx's esbuild service is a child too). */
function ranksOf(pid: number): number[] {
  try {
    return execFileSync('pgrep', ['-P', String(pid), '-f', 'train .*--rank'], { encoding: 'utf8' })
      .trim()
      .split('\n')
      .filter(Boolean)
      .map(Number);
  } catch {
    return []; // pgrep exits 1 when there are none
  }
}

/**
 * `tandem train --nodes 3`: one rank killed with SIGKILL mid-run stops the survivors with
 * PAR_TRAIN_NODE_LOST within 2 s, and the run resumes from the last checkpoint on 2 nodes.
 */
test(
  'a rank lost mid-run stops the others with a typed error; the run resumes on the nodes left',
  { timeout: 120_000 },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-train-nodes-'));
    try {
      const data = join(dir, 'data.txt');
      writeFileSync(data, TEXT);
      const out = join(dir, 'm.gguf');
      const args = [
        bin,
        'train',
        '--data',
        data,
        '--model-shape',
        'micro',
        '--steps',
        '2000',
        '--batch',
        '3',
        '--seq',
        '16',
      ];
      const run = spawn(
        process.execPath,
        [...args, '--nodes', '3', '--checkpoint-every', '2', '--out', out, '--json'],
        {
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let stdout = '';
      let stderr = '';
      run.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
      const exited = new Promise<number | null>((r) => run.once('exit', (code) => r(code)));
      await new Promise<void>((resolveStep, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`no update 5 within 60 s; stderr: ${stderr}`)),
          60_000,
        );
        run.stdout.setEncoding('utf8').on('data', (d: string) => {
          stdout += d;
          if (/"step":5,/.test(stdout)) {
            clearTimeout(timer);
            resolveStep();
          }
        });
      });
      const ranks = ranksOf(run.pid!);
      assert.equal(ranks.length, 2, `rank 0 started ${ranks.length} ranks`);
      const killedAt = Date.now();
      process.kill(ranks[1]!, 'SIGKILL');
      const code = await Promise.race([
        exited,
        new Promise<'hang'>((r) => setTimeout(() => r('hang'), 10_000)),
      ]);
      const stoppedMs = Date.now() - killedAt;
      assert.notEqual(code, 'hang', 'rank 0 did not stop within 10 s of losing a rank');
      assert.notEqual(code, 0);
      assert.match(stderr, /^\{"error":\{"code":"PAR_TRAIN_NODE_LOST"/m, stderr);
      assert.match(stderr, /--resume .*m\.gguf\.ckpt --nodes 2/, stderr);
      process.stderr.write(`# rank 0 stopped ${stoppedMs} ms after a rank was killed\n`);
      assert.ok(stoppedMs < 2000, `rank 0 took ${stoppedMs} ms to stop`);
      assert.deepEqual(ranksOf(run.pid!), []);
      const saved = await loadCheckpoint(`${out}.ckpt`);
      assert.ok(saved.step >= 4 && saved.step % 2 === 0, `checkpoint at update ${saved.step}`);

      const resumed = spawnSync(
        process.execPath,
        [
          bin,
          'train',
          '--data',
          data,
          '--resume',
          `${out}.ckpt`,
          '--nodes',
          '2',
          '--stop-after',
          '2',
          '--out',
          out,
          '--json',
        ],
        { encoding: 'utf8', timeout: 60_000 },
      );
      assert.equal(resumed.status, 0, resumed.stderr);
      const steps = resumed.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { step?: number; steps?: number });
      assert.equal(steps[0]?.step, saved.step + 1);
      assert.equal(steps.at(-1)?.steps, saved.step + 2);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
