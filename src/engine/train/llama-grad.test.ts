import { test } from 'node:test';
import assert from 'node:assert/strict';
import { referenceGemm } from '../../kernels/backward/gemm.js';
import { loadNativeGemm } from '../../kernels/backward/gemm-native.js';
import { loadWasmGemm } from '../../kernels/backward/gemm-wasm.js';
import { LlamaGrad } from './llama-grad.js';
import { MICRO_SHAPE, testBatch, testWeights } from './testing.js';

const [ROWS, SEQ] = [2, 6];

test('every tensor of the llama gradient matches central differences of the loss', () => {
  const { layout, weights } = testWeights(MICRO_SHAPE, 1);
  const model = new LlamaGrad(layout, weights, referenceGemm);
  const batch = testBatch(ROWS, SEQ, MICRO_SHAPE.vocab, 2);
  const grad = new Float32Array(layout.total);
  model.step(batch, ROWS, SEQ, grad);
  const h = 1e-3;
  for (const e of layout.entries) {
    let maxG = 0;
    for (let i = e.offset; i < e.offset + e.size; i++) maxG = Math.max(maxG, Math.abs(grad[i] as number));
    let worst = 0;
    const stride = Math.max(1, Math.floor(e.size / 6));
    for (let i = e.offset; i < e.offset + e.size; i += stride) {
      const keep = weights[i] as number;
      weights[i] = keep + h;
      const up = model.loss(batch, ROWS, SEQ);
      weights[i] = keep - h;
      const down = model.loss(batch, ROWS, SEQ);
      weights[i] = keep;
      const numeric = (up - down) / (Math.fround(keep + h) - Math.fround(keep - h));
      worst = Math.max(worst, Math.abs(numeric - (grad[i] as number)));
    }
    // f32 logits put ~1e-7 of noise on the loss, ~1e-4 on a difference over 2e-3
    assert.ok(worst <= 2e-2 * maxG + 2e-4, `${e.name}: off by ${worst} (largest gradient ${maxG})`);
  }
});

test('the wasm GEMMs give the reference gradients within f32 sum-order noise', async () => {
  const { layout, weights } = testWeights(MICRO_SHAPE, 3);
  const batch = testBatch(ROWS, SEQ, MICRO_SHAPE.vocab, 4);
  const want = new Float32Array(layout.total);
  const got = new Float32Array(layout.total);
  const l1 = new LlamaGrad(layout, weights, referenceGemm).step(batch, ROWS, SEQ, want);
  const l2 = new LlamaGrad(layout, weights, await loadWasmGemm()).step(batch, ROWS, SEQ, got);
  assert.ok(Math.abs(l1 - l2) < 1e-5);
  let d = 0;
  let m = 0;
  for (let i = 0; i < want.length; i++) {
    d = Math.max(d, Math.abs((got[i] as number) - (want[i] as number)));
    m = Math.max(m, Math.abs(want[i] as number));
  }
  assert.ok(d / m < 1e-4, `relative difference ${d / m}`);
});

test('the native kernels (products and ops in C) give the reference gradients within f32 noise', async () => {
  const { layout, weights } = testWeights(MICRO_SHAPE, 7);
  const batch = testBatch(ROWS, SEQ, MICRO_SHAPE.vocab, 8);
  const want = new Float32Array(layout.total);
  const got = new Float32Array(layout.total);
  const native = await loadNativeGemm(1);
  assert.equal(native.ops?.name, 'native');
  const l1 = new LlamaGrad(layout, weights, referenceGemm).step(batch, ROWS, SEQ, want);
  // twice: the second step reuses the model's buffers, which must not carry anything over
  const model = new LlamaGrad(layout, weights, native);
  model.step(batch, ROWS, SEQ, new Float32Array(layout.total));
  const l2 = model.step(batch, ROWS, SEQ, got);
  assert.ok(Math.abs(l1 - l2) < 1e-5, `loss ${l2} against ${l1}`);
  let d = 0;
  let m = 0;
  for (let i = 0; i < want.length; i++) {
    d = Math.max(d, Math.abs((got[i] as number) - (want[i] as number)));
    m = Math.max(m, Math.abs(want[i] as number));
  }
  assert.ok(d / m < 1e-4, `relative difference ${d / m}`);
});

test('the backward announces every range once, output first and token_embd last, covering all weights', () => {
  const { layout, weights } = testWeights(MICRO_SHAPE, 5);
  const ranges: [number, number][] = [];
  new LlamaGrad(layout, weights, referenceGemm).step(
    testBatch(1, 4, MICRO_SHAPE.vocab, 6),
    1,
    4,
    new Float32Array(layout.total),
    4,
    (a, b) => ranges.push([a, b]),
  );
  assert.equal(ranges.length, MICRO_SHAPE.layers + 2);
  assert.equal(ranges[0]?.[1], layout.total);
  assert.equal(ranges.at(-1)?.[0], 0);
  const covered = ranges.reduce((s, [a, b]) => s + b - a, 0);
  assert.equal(covered, layout.total);
});
