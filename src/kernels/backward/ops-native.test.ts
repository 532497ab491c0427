import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { AttentionShape } from './attention.js';
import { referenceGemm } from './gemm.js';
import { loadNativeGemm } from './gemm-native.js';
import { seeded } from './finite-diff.js';
import { ropeTable } from './rope.js';
import { referenceOps, type TrainOps } from './train-ops.js';

const reference = referenceOps(referenceGemm);

/** max |got - want| over max |want|. */
function relDiff(got: Float32Array, want: Float32Array): number {
  let d = 0;
  let m = 0;
  for (let i = 0; i < want.length; i++) {
    d = Math.max(d, Math.abs((got[i] as number) - (want[i] as number)));
    m = Math.max(m, Math.abs(want[i] as number));
  }
  return d / (m || 1);
}

/**
 * One op run on fresh copies of the same inputs by each implementation: `run` gets the ops
 * and the copies, and returns its scalar result (or 0); `outs` are the arrays it writes.
 */
interface Case {
  name: string;
  inputs: () => Float32Array[];
  outs: number[];
  run: (ops: TrainOps, a: Float32Array[]) => number;
  tol: number;
}

function cases(scale: 1 | 2): Case[] {
  const [n, dim] = [5 * scale * scale, 37 * scale * 7];
  const len = 70001 * (scale - 1) + 1001;
  const att: AttentionShape = { rows: 2 * scale, seq: 19 * scale, heads: 4, kvHeads: 2, headDim: 6 * scale };
  const qn = att.rows * att.seq * att.heads * att.headDim;
  const kn = att.rows * att.seq * att.kvHeads * att.headDim;
  const pn = att.rows * att.heads * att.seq * att.seq;
  const table = ropeTable(att.seq, att.headDim, 10000);
  const [rows, vocab] = [9 * scale * scale, 2001];
  const targets = Int32Array.from({ length: rows }, (_, i) => (i * 977) % vocab);
  const P = 3 * len;
  const mask = Uint8Array.from({ length: P }, (_, i) => (i % 3 === 0 ? 1 : 0));
  const step = {
    lr: 3e-3,
    beta1: 0.9,
    beta2: 0.95,
    eps: 1e-8,
    c1: 1 - 0.9 ** 3,
    c2: 1 - 0.95 ** 3,
    decay: 0.9997,
  };
  const f = (k: number): Float32Array => new Float32Array(k);
  return [
    {
      name: 'RMSNorm forward',
      inputs: () => [seeded(n * dim, 1, 2), seeded(dim, 2), f(n * dim), f(n)],
      outs: [2, 3],
      run: (o, [x, w, y, r]) => (o.rmsNormForward(x!, w!, 1e-5, y!, r!, n), 0),
      tol: 1e-6,
    },
    {
      name: 'RMSNorm backward',
      inputs: () => [
        seeded(n * dim, 3),
        seeded(dim, 4),
        seeded(n, 5),
        seeded(n * dim, 6),
        f(n * dim),
        seeded(dim, 7),
      ],
      outs: [4, 5],
      run: (o, [x, w, r, dy, dx, dw]) => (o.rmsNormBackward(x!, w!, r!, dy!, dx!, dw!, n), 0),
      tol: 1e-5,
    },
    {
      name: 'SwiGLU forward (with saturated gates)',
      inputs: () => [
        Float32Array.from(seeded(len, 8, 12), (g, i) =>
          i < 8 ? [-100, 100, -88, 88, -87.5, 0, 1e-8, -30][i]! : g,
        ),
        seeded(len, 9, 2),
        f(len),
      ],
      outs: [2],
      run: (o, [g, u, h]) => (o.swigluForward(g!, u!, h!), 0),
      tol: 1e-6,
    },
    {
      name: 'SwiGLU backward',
      inputs: () => [seeded(len, 10, 12), seeded(len, 11, 2), seeded(len, 12), f(len), f(len)],
      outs: [3, 4],
      run: (o, [g, u, dh, dg, du]) => (o.swigluBackward(g!, u!, dh!, dg!, du!), 0),
      tol: 1e-6,
    },
    {
      name: 'cross-entropy (loss and gradient in place)',
      inputs: () => [seeded(rows * vocab, 13, 9)],
      outs: [0],
      run: (o, [z]) => o.crossEntropyInPlace(z!, targets, rows, vocab, rows * 3),
      tol: 1e-6,
    },
    {
      name: 'RoPE forward and back',
      inputs: () => [seeded(qn, 14), seeded(qn, 15)],
      outs: [0, 1],
      run: (o, [x, y]) => (
        o.ropeApply(x!, table, att.rows, att.seq, att.heads, 1),
        o.ropeApply(y!, table, att.rows, att.seq, att.heads, -1),
        0
      ),
      tol: 1e-6,
    },
    {
      name: 'attention forward',
      inputs: () => [seeded(qn, 16, 2), seeded(kn, 17, 2), seeded(kn, 18), f(qn), f(pn)],
      outs: [3, 4],
      run: (o, [q, k, v, out, probs]) => (o.attentionForward(att, q!, k!, v!, out!, probs!), 0),
      tol: 1e-5,
    },
    {
      name: 'attention backward',
      inputs: () => {
        const [q, k, v, out, probs] = [seeded(qn, 19, 2), seeded(kn, 20, 2), seeded(kn, 21), f(qn), f(pn)];
        reference.attentionForward(att, q, k, v, out, probs);
        return [q, k, v, probs, seeded(qn, 22), f(qn), seeded(kn, 23), seeded(kn, 24)];
      },
      outs: [5, 6, 7],
      run: (o, [q, k, v, probs, dout, dq, dk, dv]) => (
        o.attentionBackward(att, q!, k!, v!, probs!, dout!, dq!, dk!, dv!),
        0
      ),
      tol: 1e-5,
    },
    {
      name: 'sum of squares, scale, add',
      inputs: () => [seeded(len, 25), seeded(len, 26)],
      outs: [0],
      run: (o, [a, b]) => {
        const ss = o.sumSquares(a!);
        o.scale(a!, 0.37);
        o.add(a!, b!);
        return ss;
      },
      tol: 1e-7,
    },
    {
      name: 'AdamW over all parameters',
      inputs: () => [
        seeded(P, 27),
        seeded(P, 28, 0.1),
        seeded(P, 29, 0.01),
        Float32Array.from(seeded(P, 30, 1e-4), Math.abs),
      ],
      outs: [0, 2, 3],
      run: (o, [w, g, m, v]) => (o.adamw(w!, g!, m!, v!, mask, step), 0),
      tol: 1e-6,
    },
  ];
}

test('every native op matches its TypeScript twin', async () => {
  const native = (await loadNativeGemm(1)).ops!;
  assert.equal(native.name, 'native');
  for (const c of cases(1)) {
    const want = c.inputs();
    const got = c.inputs();
    const r1 = c.run(reference, want);
    const r2 = c.run(native, got);
    assert.ok(Math.abs(r1 - r2) <= c.tol * Math.max(1, Math.abs(r1)), `${c.name}: ${r2} against ${r1}`);
    for (const i of c.outs) {
      const d = relDiff(got[i]!, want[i]!);
      assert.ok(d <= c.tol, `${c.name}, output ${i}: relative difference ${d}`);
    }
  }
});

test('the native ops give the same bits on 1 and 3 threads, past the size that splits them', async () => {
  const one = (await loadNativeGemm(1)).ops!;
  const three = (await loadNativeGemm(3)).ops!;
  for (const c of cases(2)) {
    const a = c.inputs();
    const b = c.inputs();
    assert.equal(c.run(three, b), c.run(one, a), c.name);
    for (const i of c.outs) assert.deepEqual(b[i], a[i], `${c.name}, output ${i}`);
  }
});

test('cross-entropy with a target outside the vocabulary gives NaN, not a read past the row', async () => {
  const native = (await loadNativeGemm(1)).ops!;
  const z = seeded(2 * 7, 31);
  assert.ok(Number.isNaN(native.crossEntropyInPlace(z, Int32Array.from([3, 7]), 2, 7, 2)));
});
