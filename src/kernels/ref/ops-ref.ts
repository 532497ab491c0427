import type { RopeParams } from '../types.js';
import { roundF16 } from '../half.js';

/**
 * Plain TypeScript element-wise and attention kernels, written to follow llama.cpp's CPU
 * numerics (sums in float64 where ggml uses ggml_float, results rounded to f32).
 */

/**
 * RMSNorm with llama.cpp's exact float chain: squares rounded to f32 and summed in f64,
 * mean, mean + eps, sqrt and 1 / sqrt each rounded to f32, then (x * scale) rounded before
 * the weight multiplies it. Being one ulp off in `scale` is harmless by itself, but it moves
 * activations across q8_0 rounding ties in the next matmul, which then differs from
 * llama.cpp by one quantisation step (measured: a flipped greedy token on a Q8_0 model).
 * x, out: [n, dim]; weight: [dim]; out may be x.
 */
export function rmsNormRef(
  x: Float32Array,
  weight: Float32Array,
  eps: number,
  out: Float32Array,
  n: number,
): void {
  const fr = Math.fround;
  const dim = weight.length;
  const eps32 = fr(eps);
  for (let t = 0; t < n; t++) {
    const o = t * dim;
    let sum = 0;
    for (let i = 0; i < dim; i++) {
      const v = x[o + i] as number;
      sum += fr(v * v);
    }
    const scale = fr(1 / fr(Math.sqrt(fr(fr(sum / dim) + eps32))));
    for (let i = 0; i < dim; i++) out[o + i] = fr((x[o + i] as number) * scale) * (weight[i] as number);
  }
}

// x: [n, len]
export function softmaxRef(x: Float32Array, n: number, len: number): void {
  for (let t = 0; t < n; t++) {
    const o = t * len;
    let max = -Infinity;
    for (let i = 0; i < len; i++) max = Math.max(max, x[o + i] as number);
    let sum = 0;
    for (let i = 0; i < len; i++) {
      const e = Math.fround(Math.exp((x[o + i] as number) - max));
      x[o + i] = e;
      sum += e;
    }
    const inv = Math.fround(1 / sum);
    for (let i = 0; i < len; i++) x[o + i] = (x[o + i] as number) * inv;
  }
}

// gate, up, out: [len]
export function swigluRef(gate: Float32Array, up: Float32Array, out: Float32Array): void {
  for (let i = 0; i < gate.length; i++) {
    const g = gate[i] as number;
    out[i] = Math.fround(g / (1 + Math.exp(-g))) * (up[i] as number);
  }
}

/** cos/sin for one position: [ropeDim/2] each, computed like ggml_rope_cache_init (f32 steps). */
export function ropeAngles(pos: number, p: RopeParams, cos: Float32Array, sin: Float32Array): void {
  const ropeDim = p.ropeDim ?? p.headDim;
  const thetaScale = Math.fround(Math.pow(p.freqBase, -2 / ropeDim));
  const freqScale = p.freqScale ?? 1;
  let theta = Math.fround(pos);
  for (let i = 0; i < ropeDim / 2; i++) {
    const ff = p.freqFactors ? (p.freqFactors[i] as number) : 1;
    const t = Math.fround(freqScale * Math.fround(theta / ff));
    cos[i] = Math.cos(t);
    sin[i] = Math.sin(t);
    theta = Math.fround(theta * thetaScale);
  }
}

// x: [n, heads, headDim]; positions: [n]
export function ropeRef(x: Float32Array, positions: Int32Array, heads: number, p: RopeParams): void {
  const hd = p.headDim;
  const ropeDim = p.ropeDim ?? hd;
  const half = ropeDim / 2;
  const cos = new Float32Array(half);
  const sin = new Float32Array(half);
  for (let t = 0; t < positions.length; t++) {
    ropeAngles(positions[t] as number, p, cos, sin);
    for (let h = 0; h < heads; h++) {
      const o = (t * heads + h) * hd;
      for (let i = 0; i < half; i++) {
        const a = p.style === 'neox' ? o + i : o + 2 * i;
        const b = p.style === 'neox' ? o + i + half : o + 2 * i + 1;
        const x0 = x[a] as number;
        const x1 = x[b] as number;
        const c = cos[i] as number;
        const s = sin[i] as number;
        x[a] = Math.fround(x0 * c) - Math.fround(x1 * s);
        x[b] = Math.fround(x0 * s) + Math.fround(x1 * c);
      }
    }
  }
}

/**
 * Causal grouped-query attention. q, out: [n, heads, hd]; k, v: [maxSeq, kvHeads, hd]
 * holding positions 0..pos0+n-1. With an f16 cache, q and the probabilities are rounded to
 * f16 before their dot products, as llama.cpp's f16 mat-muls convert their f32 operand.
 */
export function attentionRef(
  q: Float32Array,
  k: Float32Array,
  v: Float32Array,
  out: Float32Array,
  shape: { n: number; heads: number; kvHeads: number; hd: number; pos0: number; scale: number; f16: boolean },
): void {
  const { n, heads, kvHeads, hd, pos0, scale, f16 } = shape;
  const group = heads / kvHeads;
  const scores = new Float32Array(pos0 + n);
  const qh = new Float32Array(hd);
  for (let t = 0; t < n; t++) {
    const len = pos0 + t + 1;
    for (let h = 0; h < heads; h++) {
      const kvh = Math.floor(h / group);
      const qo = (t * heads + h) * hd;
      for (let i = 0; i < hd; i++) qh[i] = f16 ? roundF16(q[qo + i] as number) : (q[qo + i] as number);
      for (let p = 0; p < len; p++) {
        const ko = (p * kvHeads + kvh) * hd;
        let s = 0;
        for (let i = 0; i < hd; i++) s += (qh[i] as number) * (k[ko + i] as number);
        scores[p] = Math.fround(s) * scale;
      }
      softmaxRef(scores, 1, len);
      for (let i = 0; i < hd; i++) {
        let s = 0;
        for (let p = 0; p < len; p++) {
          const w = f16 ? roundF16(scores[p] as number) : (scores[p] as number);
          s += w * (v[(p * kvHeads + kvh) * hd + i] as number);
        }
        out[qo + i] = s;
      }
    }
  }
}
