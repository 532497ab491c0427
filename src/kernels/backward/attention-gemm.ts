import type { AttentionShape } from './attention.js';
import type { Gemm } from './gemm.js';

/**
 * attention.ts's forward and backward with the O(seq^2 headDim) products on a Gemm, one
 * (row, head) at a time: the head's q, k, v are gathered into contiguous [seq, headDim]
 * blocks, and scores, probabilities and their gradients are [seq, seq] matrices with the
 * causal upper triangle zero. Same shapes and results as the loops (the twin its test holds
 * it to), several times faster on the wasm GEMMs.
 */

function gather(
  src: Float32Array,
  dst: Float32Array,
  s: AttentionShape,
  b: number,
  head: number,
  heads: number,
): void {
  const d = s.headDim;
  for (let t = 0; t < s.seq; t++) {
    const o = ((b * s.seq + t) * heads + head) * d;
    dst.set(src.subarray(o, o + d), t * d);
  }
}

function scatter(
  src: Float32Array,
  dst: Float32Array,
  s: AttentionShape,
  b: number,
  head: number,
  heads: number,
  add: boolean,
): void {
  const d = s.headDim;
  for (let t = 0; t < s.seq; t++) {
    const o = ((b * s.seq + t) * heads + head) * d;
    if (!add) dst.set(src.subarray(t * d, t * d + d), o);
    else for (let i = 0; i < d; i++) dst[o + i] = (dst[o + i] as number) + (src[t * d + i] as number);
  }
}

/** Row-wise causal softmax of scaled scores, in place: p[t, j] for j <= t, 0 above. */
function causalSoftmax(p: Float32Array, seq: number, scale: number): void {
  for (let t = 0; t < seq; t++) {
    const o = t * seq;
    let max = -Infinity;
    for (let j = 0; j <= t; j++) max = Math.max(max, (p[o + j] as number) * scale);
    let sum = 0;
    for (let j = 0; j <= t; j++) {
      const e = Math.exp((p[o + j] as number) * scale - max);
      p[o + j] = e;
      sum += e;
    }
    for (let j = 0; j <= t; j++) p[o + j] = (p[o + j] as number) / sum;
    p.fill(0, o + t + 1, o + seq);
  }
}

export function attentionForwardGemm(
  s: AttentionShape,
  q: Float32Array,
  k: Float32Array,
  v: Float32Array,
  out: Float32Array,
  probs: Float32Array,
  gemm: Gemm,
): void {
  const { rows, seq, heads, kvHeads, headDim: d } = s;
  const group = heads / kvHeads;
  const qh = new Float32Array(seq * d);
  const kh = new Float32Array(seq * d);
  const vh = new Float32Array(seq * d);
  const oh = new Float32Array(seq * d);
  for (let b = 0; b < rows; b++) {
    for (let h = 0; h < heads; h++) {
      const kvh = Math.floor(h / group);
      if (h % group === 0) {
        gather(k, kh, s, b, kvh, kvHeads);
        gather(v, vh, s, b, kvh, kvHeads);
      }
      gather(q, qh, s, b, h, heads);
      const p = probs.subarray((b * heads + h) * seq * seq, (b * heads + h + 1) * seq * seq);
      gemm.nt(qh, kh, p, seq, seq, d);
      causalSoftmax(p, seq, 1 / Math.sqrt(d));
      gemm.nn(p, vh, oh, seq, d, seq);
      scatter(oh, out, s, b, h, heads, false);
    }
  }
}

export function attentionBackwardGemm(
  s: AttentionShape,
  q: Float32Array,
  k: Float32Array,
  v: Float32Array,
  probs: Float32Array,
  dout: Float32Array,
  dq: Float32Array,
  dk: Float32Array,
  dv: Float32Array,
  gemm: Gemm,
): void {
  const { rows, seq, heads, kvHeads, headDim: d } = s;
  const group = heads / kvHeads;
  const scale = 1 / Math.sqrt(d);
  const [qh, kh, vh, doh, tmp] = [0, 0, 0, 0, 0].map(() => new Float32Array(seq * d)) as [
    Float32Array,
    Float32Array,
    Float32Array,
    Float32Array,
    Float32Array,
  ];
  const ds = new Float32Array(seq * seq);
  dk.fill(0);
  dv.fill(0);
  for (let b = 0; b < rows; b++) {
    for (let h = 0; h < heads; h++) {
      const kvh = Math.floor(h / group);
      if (h % group === 0) {
        gather(k, kh, s, b, kvh, kvHeads);
        gather(v, vh, s, b, kvh, kvHeads);
      }
      gather(q, qh, s, b, h, heads);
      gather(dout, doh, s, b, h, heads);
      const p = probs.subarray((b * heads + h) * seq * seq, (b * heads + h + 1) * seq * seq);
      gemm.nt(doh, vh, ds, seq, seq, d); // dP
      for (let t = 0; t < seq; t++) {
        const o = t * seq;
        let mean = 0;
        for (let j = 0; j <= t; j++) mean += (p[o + j] as number) * (ds[o + j] as number);
        for (let j = 0; j <= t; j++)
          ds[o + j] = (p[o + j] as number) * ((ds[o + j] as number) - mean) * scale;
        ds.fill(0, o + t + 1, o + seq);
      }
      gemm.nn(ds, kh, tmp, seq, d, seq);
      scatter(tmp, dq, s, b, h, heads, false);
      gemm.tn(ds, qh, tmp, seq, d, seq);
      scatter(tmp, dk, s, b, kvh, kvHeads, true);
      gemm.tn(p, doh, tmp, seq, d, seq);
      scatter(tmp, dv, s, b, kvh, kvHeads, true);
    }
  }
}
