import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalWorld, type Communicator } from '../../collectives/index.js';
import {
  loadCheckpoint,
  train,
  type RunSettings,
  type TrainConfig,
  type TrainResult,
} from '../../engine/train/index.js';
import { MICRO_TOKENS, microRunSettings } from '../../engine/train/testing.js';
import { referenceGemm } from '../../kernels/backward/gemm.js';
import { CollectiveGradSync } from './grad-sync.js';
import { ShardedGradSync } from './sharded-sync.js';

const tokens = MICRO_TOKENS;

/** A run on `size` local ranks, each with the sync `make` builds; rank 0 may checkpoint. */
async function ranks(
  size: number,
  s: RunSettings,
  make: (c: Communicator) => CollectiveGradSync,
  checkpoint?: string,
  more: Partial<TrainConfig> = {},
): Promise<TrainResult[]> {
  const world = await createLocalWorld(size);
  try {
    return await Promise.all(
      world.map((comm) =>
        train({
          settings: s,
          tokens,
          gemm: referenceGemm,
          sync: make(comm),
          ...(checkpoint && comm.rank === 0 ? { checkpoint, checkpointEvery: 2 } : {}),
          ...more,
        }),
      ),
    );
  } finally {
    await Promise.all(world.map((c) => c.close()));
  }
}

const replicated = (c: Communicator): CollectiveGradSync => new CollectiveGradSync(c);
const sharded = (c: Communicator): CollectiveGradSync => new ShardedGradSync(c);

test('2 ranks, no clipping: the split optimizer gives the all-reduce run its curve and weights bit for bit', async () => {
  // clip 0: the update reads the summed gradient alone, which a reduce-scatter of 2 ranks sums as the all-reduce does
  const plain = await ranks(2, microRunSettings(0), replicated);
  const split = await ranks(2, microRunSettings(0), sharded);
  for (const r of split) {
    assert.deepEqual(r.weights, plain[0]!.weights);
    assert.deepEqual(
      r.curve.map((p) => p.loss),
      plain[0]!.curve.map((p) => p.loss),
    );
  }
});

test('clipped, on 2 and 3 ranks: every rank holds the same weights, within 1e-6 of the all-reduce run', async () => {
  for (const size of [2, 3]) {
    const plain = await ranks(size, microRunSettings(0.05), replicated);
    const split = await ranks(size, microRunSettings(0.05), sharded);
    // the same bits on every rank (3 ranks: buckets the ranks do not divide evenly travel padded)
    for (const r of split.slice(1)) assert.deepEqual(r.weights, split[0]!.weights);
    // the clipping norm is summed per rank first, then over ranks: its last bits may differ,
    // and the scale with them (a relative 1e-7 per update, over 5 updates)
    let worst = 0;
    for (let i = 0; i < plain[0]!.weights.length; i++)
      worst = Math.max(worst, Math.abs(split[0]!.weights[i]! - plain[0]!.weights[i]!));
    assert.ok(worst < 1e-6, `${size} ranks: weights differ by ${worst}`);
    for (const [i, p] of split[0]!.curve.entries())
      assert.ok(Math.abs(p.loss - plain[0]!.curve[i]!.loss) < 1e-6, `update ${i + 1}`);
  }
});

test("rank 0's checkpoint holds every rank's moments: the all-reduce run's, bit for bit without clipping", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-sharded-'));
  try {
    await ranks(2, microRunSettings(0), replicated, join(dir, 'plain.ckpt'));
    await ranks(2, microRunSettings(0), sharded, join(dir, 'split.ckpt'));
    const plain = await loadCheckpoint(join(dir, 'plain.ckpt'));
    const split = await loadCheckpoint(join(dir, 'split.ckpt'));
    assert.equal(split.step, 5);
    assert.deepEqual(split.m, plain.m);
    assert.deepEqual(split.v, plain.v);
    assert.deepEqual(split.weights, plain.weights);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a split run stopped at update 3 and resumed from rank 0's checkpoint gives the uninterrupted curve bit for bit", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-sharded-'));
  try {
    const whole = await ranks(2, microRunSettings(0.05), sharded);
    const ckpt = join(dir, 'run.ckpt');
    await ranks(2, microRunSettings(0.05), sharded, ckpt, { stopAfter: 3 });
    const saved = await loadCheckpoint(ckpt);
    assert.equal(saved.step, 3);
    // every rank resumes from the checkpoint, as `train --nodes --resume` does
    const rest = await ranks(2, microRunSettings(0.05), sharded, undefined, { resume: saved });
    for (const r of rest) {
      assert.deepEqual(r.weights, whole[0]!.weights);
      assert.deepEqual(
        r.curve.map((p) => p.loss),
        whole[0]!.curve.map((p) => p.loss),
      );
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
