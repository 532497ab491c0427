import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TandemError } from '../../errors/index.js';
import { referenceGemm } from '../../kernels/backward/gemm.js';
import { loadCheckpoint, type RunSettings } from './checkpoint.js';
import { hashTokens } from './data.js';
import { train, type StepLog } from './trainer.js';
import { MICRO_SHAPE } from './testing.js';

/** A text with structure to learn: a fixed cycle of 9 token ids, so the loss can fall far below log(vocab). */
const tokens = Int32Array.from({ length: 600 }, (_, i) => [3, 7, 1, 9, 2, 8, 4, 6, 5][i % 9] as number);

function settings(steps: number): RunSettings {
  return {
    shapeName: 'micro-test',
    shape: MICRO_SHAPE,
    seed: 1,
    steps,
    batch: 4,
    seq: 12,
    lr: 1e-2,
    warmup: 3,
    minLrRatio: 0.1,
    weightDecay: 0.1,
    clip: 1,
    dataTokens: tokens.length,
    dataHash: hashTokens(tokens),
  };
}

test('training lowers the loss on a learnable sequence', async () => {
  const logs: StepLog[] = [];
  const r = await train({ settings: settings(40), tokens, gemm: referenceGemm, onStep: (l) => logs.push(l) });
  assert.equal(r.step, 40);
  assert.equal(logs.length, 40);
  const first = logs[0]!.loss;
  assert.ok(Math.abs(first - Math.log(MICRO_SHAPE.vocab)) < 0.3, `first loss ${first}`);
  assert.ok(r.finalLoss < 0.5 * first, `final loss ${r.finalLoss} against ${first}`);
  for (const l of logs) assert.ok(l.tokens_per_s > 0 && l.lr > 0);
});

test('a run stopped at a checkpoint and resumed gives the uninterrupted loss curve and weights bit for bit', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-train-'));
  try {
    const whole = await train({ settings: settings(8), tokens, gemm: referenceGemm });
    const ckpt = join(dir, 'run.ckpt');
    const part = await train({
      settings: settings(8),
      tokens,
      gemm: referenceGemm,
      checkpoint: ckpt,
      checkpointEvery: 2,
      stopAfter: 3,
    });
    assert.equal(part.step, 3);
    const saved = await loadCheckpoint(ckpt);
    assert.equal(saved.step, 3);
    const rest = await train({
      settings: settings(8),
      tokens,
      gemm: referenceGemm,
      resume: saved,
      checkpoint: ckpt,
    });
    assert.deepEqual(
      rest.curve.map((p) => p.loss),
      whole.curve.map((p) => p.loss),
    );
    assert.deepEqual(rest.weights, whole.weights);
    assert.equal((await loadCheckpoint(ckpt)).step, 8);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a truncated or foreign checkpoint is refused with TRAIN_CHECKPOINT', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-train-'));
  try {
    const ckpt = join(dir, 'c.ckpt');
    await train({ settings: settings(1), tokens, gemm: referenceGemm, checkpoint: ckpt });
    const bytes = (await import('node:fs')).readFileSync(ckpt);
    writeFileSync(ckpt, bytes.subarray(0, bytes.length - 4));
    await assert.rejects(
      loadCheckpoint(ckpt),
      (e: unknown) =>
        e instanceof TandemError && e.code === 'TRAIN_CHECKPOINT' && /truncated/.test(e.message),
    );
    writeFileSync(ckpt, 'hello');
    await assert.rejects(
      loadCheckpoint(ckpt),
      (e: unknown) => e instanceof TandemError && e.code === 'TRAIN_CHECKPOINT',
    );
    await assert.rejects(
      loadCheckpoint(join(dir, 'none')),
      (e: unknown) => e instanceof TandemError && e.code === 'TRAIN_CHECKPOINT',
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
