import { attentionBackwardGemm, attentionForwardGemm } from './attention-gemm.js';
import type { AttentionShape } from './attention.js';
import { crossEntropyInPlace } from './cross-entropy.js';
import { fingerprint } from './fingerprint.js';
import type { Gemm } from './gemm.js';
import { rmsNormBackward, rmsNormForward } from './rms-norm.js';
import { ropeApply, type RopeTable } from './rope.js';
import { swigluBackward, swigluForward } from './swiglu.js';

/** One AdamW update's scalars: c1, c2 are the bias corrections 1 - beta^step, decay 1 - lr wd. */
export interface AdamWStep {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  c1: number;
  c2: number;
  decay: number;
}

/**
 * Everything a training step computes besides the weight products: the element-wise ops,
 * RMSNorm, RoPE, cross-entropy, attention (its per-head products included) and the
 * optimizer's passes over all parameters. Each method has the semantics of the TypeScript
 * function of the same name (rms-norm.ts, swiglu.ts, cross-entropy.ts, rope.ts,
 * attention-gemm.ts), which referenceOps runs; the native ops (ops-native.ts) compute the
 * same in C and differ only in f32 rounding and sum order.
 */
export interface TrainOps {
  readonly name: 'reference' | 'native';
  rmsNormForward(
    x: Float32Array,
    w: Float32Array,
    eps: number,
    y: Float32Array,
    r: Float32Array,
    n: number,
  ): void;
  rmsNormBackward(
    x: Float32Array,
    w: Float32Array,
    r: Float32Array,
    dy: Float32Array,
    dx: Float32Array,
    dw: Float32Array,
    n: number,
  ): void;
  swigluForward(g: Float32Array, u: Float32Array, h: Float32Array): void;
  swigluBackward(
    g: Float32Array,
    u: Float32Array,
    dh: Float32Array,
    dg: Float32Array,
    du: Float32Array,
  ): void;
  crossEntropyInPlace(
    logits: Float32Array,
    targets: Int32Array,
    n: number,
    vocab: number,
    denominator: number,
  ): number;
  ropeApply(x: Float32Array, table: RopeTable, rows: number, seq: number, heads: number, sign: 1 | -1): void;
  attentionForward(
    s: AttentionShape,
    q: Float32Array,
    k: Float32Array,
    v: Float32Array,
    out: Float32Array,
    probs: Float32Array,
  ): void;
  /** dq written; dk and dv overwritten with the sums over each kv head's query heads. */
  attentionBackward(
    s: AttentionShape,
    q: Float32Array,
    k: Float32Array,
    v: Float32Array,
    probs: Float32Array,
    dout: Float32Array,
    dq: Float32Array,
    dk: Float32Array,
    dv: Float32Array,
  ): void;
  /** a += b. */
  add(a: Float32Array, b: Float32Array): void;
  sumSquares(x: Float32Array): number;
  scale(x: Float32Array, factor: number): void;
  /** AdamW over all parameters: decoupled decay where mask[i] is 1, then the Adam step (adamw.ts). */
  adamw(
    w: Float32Array,
    g: Float32Array,
    m: Float32Array,
    v: Float32Array,
    mask: Uint8Array,
    s: AdamWStep,
  ): void;
  /** x's 512-bit fingerprint into out (16 words): fingerprint.ts's, bit for bit in every implementation. */
  fingerprint(x: Float32Array, out: Uint32Array): void;
}

/** The TypeScript ops, attention's products on `gemm`: the truth the native ops are held to. */
export function referenceOps(gemm: Gemm): TrainOps {
  return {
    name: 'reference',
    rmsNormForward,
    rmsNormBackward,
    swigluForward,
    swigluBackward,
    crossEntropyInPlace,
    ropeApply,
    attentionForward: (s, q, k, v, out, probs) => attentionForwardGemm(s, q, k, v, out, probs, gemm),
    attentionBackward: (s, q, k, v, probs, dout, dq, dk, dv) =>
      attentionBackwardGemm(s, q, k, v, probs, dout, dq, dk, dv, gemm),
    add(a, b) {
      for (let i = 0; i < a.length; i++) a[i] = (a[i] as number) + (b[i] as number);
    },
    sumSquares(x) {
      let ss = 0;
      for (let i = 0; i < x.length; i++) ss += (x[i] as number) ** 2;
      return ss;
    },
    scale(x, factor) {
      for (let i = 0; i < x.length; i++) x[i] = (x[i] as number) * factor;
    },
    adamw: adamwReference,
    fingerprint,
  };
}

function adamwReference(
  w: Float32Array,
  g: Float32Array,
  m: Float32Array,
  v: Float32Array,
  mask: Uint8Array,
  s: AdamWStep,
): void {
  const { lr, beta1, beta2, eps, c1, c2, decay } = s;
  for (let i = 0; i < w.length; i++) {
    const gi = g[i] as number;
    const mi = beta1 * (m[i] as number) + (1 - beta1) * gi;
    const vi = beta2 * (v[i] as number) + (1 - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    let p = w[i] as number;
    if (mask[i]) p *= decay;
    w[i] = p - (lr * (mi / c1)) / (Math.sqrt(vi / c2) + eps);
  }
}
