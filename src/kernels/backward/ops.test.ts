import { test } from 'node:test';
import assert from 'node:assert/strict';
import { attentionBackward, attentionForward, type AttentionShape } from './attention.js';
import { crossEntropyInPlace, crossEntropyLoss } from './cross-entropy.js';
import { dotLoss, gradError, seeded } from './finite-diff.js';
import { rmsNormBackward, rmsNormForward } from './rms-norm.js';
import { ropeApply, ropeTable } from './rope.js';
import { swigluBackward, swigluForward } from './swiglu.js';

/** Central differences in f32 with h = 1e-2 agree with exact gradients to ~1e-4 of their scale. */
const TOL = 3e-3;

test('RMSNorm backward matches finite differences (x and w)', () => {
  const [n, dim] = [3, 16];
  const x = seeded(n * dim, 1);
  const w = seeded(dim, 2);
  const proj = seeded(n * dim, 3);
  const y = new Float32Array(n * dim);
  const r = new Float32Array(n);
  const loss = (): number => {
    rmsNormForward(x, w, 1e-5, y, r, n);
    return dotLoss(y, proj);
  };
  loss();
  const dx = new Float32Array(n * dim);
  const dw = new Float32Array(dim);
  rmsNormBackward(x, w, r, proj, dx, dw, n);
  assert.ok(gradError(x, dx, loss) < TOL, `dx ${gradError(x, dx, loss)}`);
  assert.ok(gradError(w, dw, loss) < TOL, `dw ${gradError(w, dw, loss)}`);
});

test('RoPE backward is the inverse rotation, and matches finite differences', () => {
  const [rows, seq, heads, d] = [2, 5, 3, 8];
  const table = ropeTable(seq, d, 10000);
  const x = seeded(rows * seq * heads * d, 4);
  const proj = seeded(x.length, 5);
  const loss = (): number => {
    const y = x.slice();
    ropeApply(y, table, rows, seq, heads, 1);
    return dotLoss(y, proj);
  };
  const dx = proj.slice();
  ropeApply(dx, table, rows, seq, heads, -1);
  assert.ok(gradError(x, dx, loss) < TOL);
  const back = x.slice();
  ropeApply(back, table, rows, seq, heads, 1);
  ropeApply(back, table, rows, seq, heads, -1);
  for (let i = 0; i < x.length; i++) assert.ok(Math.abs((back[i] as number) - (x[i] as number)) < 1e-6);
});

test('SwiGLU backward matches finite differences', () => {
  const g = seeded(40, 6, 3);
  const u = seeded(40, 7, 2);
  const proj = seeded(40, 8);
  const h = new Float32Array(40);
  const loss = (): number => {
    swigluForward(g, u, h);
    return dotLoss(h, proj);
  };
  const dg = new Float32Array(40);
  const du = new Float32Array(40);
  swigluBackward(g, u, proj, dg, du);
  assert.ok(gradError(g, dg, loss) < TOL);
  assert.ok(gradError(u, du, loss) < TOL);
});

test('cross-entropy gradient matches finite differences and its loss is log-sum-exp minus the target', () => {
  const [n, vocab] = [4, 11];
  const logits = seeded(n * vocab, 9, 3);
  const targets = [0, 10, 3, 3];
  const loss = (): number => crossEntropyLoss(logits, targets, n, vocab);
  const grad = logits.slice();
  const value = crossEntropyInPlace(grad, targets, n, vocab);
  assert.ok(Math.abs(value - loss()) < 1e-9);
  assert.ok(gradError(logits, grad, loss, 44) < TOL);
  const uniform = new Float32Array(vocab);
  assert.ok(Math.abs(crossEntropyLoss(uniform, [2], 1, vocab) - Math.log(vocab)) < 1e-9);
});

test('grouped-query causal attention backward matches finite differences (q, k, v)', () => {
  const s: AttentionShape = { rows: 2, seq: 5, heads: 4, kvHeads: 2, headDim: 4 };
  const q = seeded(s.rows * s.seq * s.heads * s.headDim, 10);
  const k = seeded(s.rows * s.seq * s.kvHeads * s.headDim, 11);
  const v = seeded(k.length, 12);
  const proj = seeded(q.length, 13);
  const out = new Float32Array(q.length);
  const probs = new Float32Array(s.rows * s.heads * s.seq * s.seq);
  const loss = (): number => {
    attentionForward(s, q, k, v, out, probs);
    return dotLoss(out, proj);
  };
  loss();
  const dq = new Float32Array(q.length);
  const dk = new Float32Array(k.length);
  const dv = new Float32Array(v.length);
  attentionBackward(s, q, k, v, probs, proj, dq, dk, dv);
  assert.ok(gradError(q, dq, loss, 40) < TOL, `dq ${gradError(q, dq, loss, 40)}`);
  assert.ok(gradError(k, dk, loss, 40) < TOL, `dk ${gradError(k, dk, loss, 40)}`);
  assert.ok(gradError(v, dv, loss, 40) < TOL, `dv ${gradError(v, dv, loss, 40)}`);
});

test('attention is causal: a later token does not move an earlier output', () => {
  const s: AttentionShape = { rows: 1, seq: 4, heads: 2, kvHeads: 1, headDim: 4 };
  const q = seeded(32, 14);
  const k = seeded(16, 15);
  const v = seeded(16, 16);
  const a = new Float32Array(32);
  const probs = new Float32Array(2 * 16);
  attentionForward(s, q, k, v, a, probs);
  k[12] = 5;
  v[13] = -5;
  const b = new Float32Array(32);
  attentionForward(s, q, k, v, b, probs);
  assert.deepEqual(b.subarray(0, 24), a.subarray(0, 24));
  assert.notDeepEqual(b.subarray(24), a.subarray(24));
});

test('attention on GEMMs matches the loops (forward, probabilities and all three gradients)', async () => {
  const { attentionBackwardGemm, attentionForwardGemm } = await import('./attention-gemm.js');
  const { referenceGemm } = await import('./gemm.js');
  const { loadWasmGemm } = await import('./gemm-wasm.js');
  const s: AttentionShape = { rows: 2, seq: 7, heads: 6, kvHeads: 2, headDim: 8 };
  const q = seeded(s.rows * s.seq * s.heads * s.headDim, 20);
  const k = seeded(s.rows * s.seq * s.kvHeads * s.headDim, 21);
  const v = seeded(k.length, 22);
  const dout = seeded(q.length, 23);
  const want = { out: new Float32Array(q.length), probs: new Float32Array(s.rows * s.heads * s.seq * s.seq) };
  attentionForward(s, q, k, v, want.out, want.probs);
  const wq = new Float32Array(q.length);
  const wk = new Float32Array(k.length);
  const wv = new Float32Array(v.length);
  attentionBackward(s, q, k, v, want.probs, dout, wq, wk, wv);
  for (const gemm of [referenceGemm, await loadWasmGemm()]) {
    const out = new Float32Array(q.length);
    const probs = new Float32Array(want.probs.length).fill(7);
    attentionForwardGemm(s, q, k, v, out, probs, gemm);
    const gq = new Float32Array(q.length);
    const gk = new Float32Array(k.length).fill(3);
    const gv = new Float32Array(v.length);
    attentionBackwardGemm(s, q, k, v, probs, dout, gq, gk, gv, gemm);
    for (const [name, a, b] of [
      ['out', out, want.out],
      ['dq', gq, wq],
      ['dk', gk, wk],
      ['dv', gv, wv],
    ] as const) {
      for (let i = 0; i < a.length; i++)
        assert.ok(
          Math.abs((a[i] as number) - (b[i] as number)) < 1e-5,
          `${gemm.name} ${name}[${i}]: ${a[i]} against ${b[i]}`,
        );
    }
    for (let b = 0; b < s.rows * s.heads; b++)
      for (let t = 0; t < s.seq; t++)
        for (let j = 0; j < s.seq; j++) {
          const i = (b * s.seq + t) * s.seq + j;
          if (j <= t) assert.ok(Math.abs((probs[i] as number) - (want.probs[i] as number)) < 1e-6);
          else assert.equal(probs[i], 0);
        }
  }
});
