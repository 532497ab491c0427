import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createLocalWorld } from '../../collectives/index.js';
import { TandemError } from '../../errors/index.js';
import { train } from '../../engine/train/index.js';
import { MICRO_TOKENS, microRunSettings } from '../../engine/train/testing.js';
import { referenceGemm } from '../../kernels/backward/gemm.js';
import { BUCKET_VALUES, CollectiveGradSync } from './grad-sync.js';

const tokens = MICRO_TOKENS;

test('two data-parallel ranks end with the same weights, and the curve of one process up to sum order', async () => {
  const single = await train({ settings: microRunSettings(1), tokens, gemm: referenceGemm });
  const world = await createLocalWorld(2);
  try {
    const runs = await Promise.all(
      world.map((comm) =>
        train({
          settings: microRunSettings(1),
          tokens,
          gemm: referenceGemm,
          sync: new CollectiveGradSync(comm),
        }),
      ),
    );
    assert.deepEqual(runs[0]!.weights, runs[1]!.weights);
    assert.deepEqual(
      runs[0]!.curve.map((p) => p.loss),
      runs[1]!.curve.map((p) => p.loss),
    );
    // batch 3 over 2 ranks (1 and 2 rows): the same global batch, summed in another order
    for (const [i, p] of runs[0]!.curve.entries())
      assert.ok(
        Math.abs(p.loss - single.curve[i]!.loss) < 1e-5,
        `update ${i + 1}: ${p.loss} against ${single.curve[i]!.loss}`,
      );
  } finally {
    await Promise.all(world.map((c) => c.close()));
  }
});

test('ranges larger than a bucket are summed whole; differing weights are PAR_TRAIN_DIVERGED on every rank', async () => {
  const world = await createLocalWorld(2);
  try {
    const n = BUCKET_VALUES * 2 + 5;
    const syncs = world.map((c) => new CollectiveGradSync(c));
    const grads = [0, 1].map((r) => Float32Array.from({ length: n }, (_, i) => (i % 7) + r * 0.5));
    await Promise.all(
      syncs.map(async (s, r) => {
        s.begin(grads[r]!);
        s.ready(3, n);
        s.ready(0, 3);
        await s.finish();
        assert.equal(await s.sum(r === 0 ? 0.1 : 0.2), 0.1 + 0.2);
      }),
    );
    for (const g of grads) for (let i = 0; i < n; i += 99_991) assert.equal(g[i], 2 * (i % 7) + 0.5);
    const same = Float32Array.from([1, 2, 3]);
    await Promise.all(syncs.map((s) => s.agree(same, 1)));
    const outcomes = await Promise.allSettled(
      syncs.map((s, r) => s.agree(Float32Array.from([1, 2, 3 + r]), 2)),
    );
    for (const o of outcomes) {
      assert.equal(o.status, 'rejected');
      const e = (o as PromiseRejectedResult).reason as unknown;
      assert.ok(e instanceof TandemError && e.code === 'PAR_TRAIN_DIVERGED', String(e));
    }
  } finally {
    await Promise.all(world.map((c) => c.close()));
  }
});

test("the embedding's range is summed on the named rows alone; the other rows stay 0", async () => {
  const world = await createLocalWorld(2);
  try {
    const [offset, width, vocab] = [4, 3, 6];
    const n = offset + vocab * width + 2;
    const rows = Int32Array.of(1, 4);
    // each rank touched a subset of the rows the whole batch reads; every other row is 0
    const grads = [0, 1].map((r) => {
      const g = Float32Array.from({ length: n }, (_, i) =>
        i < offset || i >= offset + vocab * width ? i + r : 0,
      );
      for (const row of r === 0 ? [1, 4] : [4])
        g.fill(r + 1 + row, offset + row * width, offset + row * width + width);
      // a row outside the named ones does not travel: it stays what this rank holds
      if (r === 1) g[offset + 2 * width] = 7;
      return g;
    });
    await Promise.all(
      world.map(async (c, r) => {
        const s = new CollectiveGradSync(c);
        s.begin(grads[r]!, { offset, size: vocab * width, width, rows });
        s.ready(offset + vocab * width, n);
        s.ready(offset, offset + vocab * width);
        s.ready(0, offset);
        await s.finish();
      }),
    );
    const want = Float32Array.from({ length: n }, (_, i) =>
      i < offset || i >= offset + vocab * width ? 2 * i + 1 : 0,
    );
    want.fill(1 + 1 + 0, offset + width, offset + 2 * width); // row 1: rank 0's 2, rank 1's 0
    want.fill(5 + 6, offset + 4 * width, offset + 5 * width); // row 4: 5 + 6
    assert.deepEqual(grads[0], want);
    want[offset + 2 * width] = 7;
    assert.deepEqual(grads[1], want);
  } finally {
    await Promise.all(world.map((c) => c.close()));
  }
});
