import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AdamW, clipGradNorm, learningRate } from './adamw.js';
import { paramLayout } from './params.js';
import { MICRO_SHAPE } from './testing.js';

test('AdamW: the first two updates follow the bias-corrected formula, and norms are not decayed', () => {
  const layout = paramLayout(MICRO_SHAPE);
  const opt = new AdamW(layout, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
  const w = new Float32Array(layout.total).fill(0.5);
  const g = new Float32Array(layout.total).fill(0.2);
  opt.update(w, g, 0.01, 1);
  const norm = layout.byName.get('blk.0.attn_norm.weight')!.offset;
  const mat = layout.byName.get('blk.0.attn_q.weight')!.offset;
  // step 1: m_hat = g, v_hat = g^2, so the step is lr * g / (|g| + eps) = lr
  assert.equal(w[norm], Math.fround(0.5 - 0.01 * (0.2 / (0.2 + 1e-8))));
  assert.equal(w[mat], Math.fround(0.5 * (1 - 0.01 * 0.1) - 0.01 * (0.2 / (0.2 + 1e-8))));
  g.fill(-0.1);
  const before = w[mat] as number;
  opt.update(w, g, 0.01, 2);
  const m = 0.9 * Math.fround(0.1 * 0.2) + 0.1 * -0.1;
  const v = 0.95 * Math.fround(0.05 * 0.04) + 0.05 * 0.01;
  const want =
    before * (1 - 0.001) -
    (0.01 * (Math.fround(m) / (1 - 0.81))) / (Math.sqrt(Math.fround(v) / (1 - 0.9025)) + 1e-8);
  assert.ok(Math.abs((w[mat] as number) - want) < 1e-7, `${w[mat]} against ${want}`);
});

test('gradient clipping scales to the bound and leaves small gradients alone', () => {
  const g = Float32Array.from([3, 4]);
  assert.equal(clipGradNorm(g, 1), 5);
  assert.ok(Math.abs(Math.hypot(g[0] as number, g[1] as number) - 1) < 1e-6);
  const small = Float32Array.from([0.3, 0.4]);
  clipGradNorm(small, 1);
  assert.deepEqual(small, Float32Array.from([0.3, 0.4]));
});

test('the schedule warms up linearly, peaks, and falls by a cosine to its floor', () => {
  const s = { peak: 1e-3, warmup: 4, total: 20, minRatio: 0.1 };
  assert.equal(learningRate(s, 0), 2.5e-4);
  assert.equal(learningRate(s, 3), 1e-3);
  assert.ok(Math.abs(learningRate(s, 12) - (1e-4 + 9e-4 * 0.5)) < 1e-12);
  assert.ok(Math.abs(learningRate(s, 20) - 1e-4) < 1e-12);
  for (let i = 4; i < 20; i++) assert.ok(learningRate(s, i + 1) <= learningRate(s, i));
});
