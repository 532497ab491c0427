import type { ModelShape } from '../format/model-plan.js';

/**
 * What the forward pass keeps for the backward, per layer, for a batch of n = rows * seq
 * tokens (E embd, Q = heads * headDim, K = kvHeads * headDim, F ff):
 *   xIn [n, E] the residual entering the layer; h1 [n, E] attn_norm(xIn), r1 [n] its scales;
 *   q [n, Q], k, v [n, K] (q and k after RoPE); probs [rows, heads, seq, seq]; o [n, Q];
 *   xMid [n, E] the residual after attention; h2, r2 ffn_norm(xMid); g, u [n, F]; a = swiglu.
 */
export interface LayerActs {
  xIn: Float32Array;
  h1: Float32Array;
  r1: Float32Array;
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
  probs: Float32Array;
  o: Float32Array;
  xMid: Float32Array;
  h2: Float32Array;
  r2: Float32Array;
  g: Float32Array;
  u: Float32Array;
  a: Float32Array;
}

export interface Acts {
  rows: number;
  seq: number;
  layers: LayerActs[];
  /** The residual after the last layer, output_norm of it and its scales, then the logits [n, vocab]. */
  xOut: Float32Array;
  hf: Float32Array;
  rf: Float32Array;
  logits: Float32Array;
}

/** Buffers for a batch of rows x seq tokens, allocated once and reused every step. */
export function allocActs(s: ModelShape, rows: number, seq: number): Acts {
  const n = rows * seq;
  const E = s.embd;
  const Q = s.heads * s.headDim;
  const K = s.kvHeads * s.headDim;
  const f = (len: number): Float32Array => new Float32Array(len);
  const layers: LayerActs[] = [];
  for (let l = 0; l < s.layers; l++) {
    layers.push({
      xIn: f(n * E),
      h1: f(n * E),
      r1: f(n),
      q: f(n * Q),
      k: f(n * K),
      v: f(n * K),
      probs: f(rows * s.heads * seq * seq),
      o: f(n * Q),
      xMid: f(n * E),
      h2: f(n * E),
      r2: f(n),
      g: f(n * s.ff),
      u: f(n * s.ff),
      a: f(n * s.ff),
    });
  }
  return { rows, seq, layers, xOut: f(n * E), hf: f(n * E), rf: f(n), logits: f(n * s.vocab) };
}

/**
 * The backward's gradient buffers for a batch of n tokens, allocated once and overwritten each
 * step: dh, dx, dr [n, E] (a norm's input gradient, the residual's, a norm's output before it is
 * added); da, dg, du [n, F]; dout, dq [n, Q]; dk, dv [n, K].
 */
export interface GradScratch {
  dh: Float32Array;
  dx: Float32Array;
  dr: Float32Array;
  da: Float32Array;
  dg: Float32Array;
  du: Float32Array;
  dout: Float32Array;
  dq: Float32Array;
  dk: Float32Array;
  dv: Float32Array;
}

export function allocGrads(s: ModelShape, rows: number, seq: number): GradScratch {
  const n = rows * seq;
  const Q = s.heads * s.headDim;
  const K = s.kvHeads * s.headDim;
  const f = (len: number): Float32Array => new Float32Array(len);
  return {
    dh: f(n * s.embd),
    dx: f(n * s.embd),
    dr: f(n * s.embd),
    da: f(n * s.ff),
    dg: f(n * s.ff),
    du: f(n * s.ff),
    dout: f(n * Q),
    dq: f(n * Q),
    dk: f(n * K),
    dv: f(n * K),
  };
}
