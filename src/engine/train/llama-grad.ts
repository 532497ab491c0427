import type { AttentionShape } from '../../kernels/backward/attention.js';
import { crossEntropyLoss } from '../../kernels/backward/cross-entropy.js';
import type { Gemm } from '../../kernels/backward/gemm.js';
import { ropeTable, type RopeTable } from '../../kernels/backward/rope.js';
import { referenceOps, type TrainOps } from '../../kernels/backward/train-ops.js';
import { allocActs, allocGrads, type Acts, type GradScratch, type LayerActs } from './activations.js';
import { views, type ParamLayout } from './params.js';

/** RMSNorm epsilon and RoPE base of make-model's llama metadata, which the written GGUF carries. */
export const LLAMA_EPS = 1e-5;
export const LLAMA_ROPE_BASE = 10000;

/** Called when the gradients in flat range [start, end) are final for this step (backward order). */
export type GradReady = (start: number, end: number) => void;

/**
 * The llama forward pass over a batch with what the backward needs kept, and the backward
 * pass into a flat gradient buffer (paramLayout's order). Gradients accumulate: the caller
 * zeroes them once per step. The weight products run on `gemm`, everything else (attention,
 * norms, SwiGLU, RoPE, cross-entropy) on its ops: the native ones where `gemm` has them, else
 * the kernels' TypeScript twins.
 *
 * A batch is rows x (seq + 1) token ids: inputs are a row's first seq tokens, targets its
 * last seq.
 */
export class LlamaGrad {
  private acts: Acts | undefined;
  private scratch: GradScratch | undefined;
  private rope: RopeTable | undefined;
  private readonly w: Map<string, Float32Array>;
  private readonly ops: TrainOps;

  constructor(
    readonly layout: ParamLayout,
    readonly weights: Float32Array,
    private readonly gemm: Gemm,
  ) {
    this.w = views(layout, weights);
    this.ops = gemm.ops ?? referenceOps(gemm);
  }

  private get(name: string): Float32Array {
    return this.w.get(name) as Float32Array;
  }

  private ready(rows: number, seq: number): Acts {
    if (this.acts?.rows !== rows || this.acts.seq !== seq) {
      this.acts = allocActs(this.layout.shape, rows, seq);
      this.scratch = allocGrads(this.layout.shape, rows, seq);
      this.rope = ropeTable(seq, this.layout.shape.headDim, LLAMA_ROPE_BASE);
    }
    return this.acts;
  }

  private attnShape(rows: number, seq: number): AttentionShape {
    const s = this.layout.shape;
    return { rows, seq, heads: s.heads, kvHeads: s.kvHeads, headDim: s.headDim };
  }

  /** Runs the forward pass; acts.logits holds [rows * seq, vocab] afterwards. */
  forward(batch: ArrayLike<number>, rows: number, seq: number): Acts {
    const s = this.layout.shape;
    const acts = this.ready(rows, seq);
    const n = rows * seq;
    const E = s.embd;
    const emb = this.get('token_embd.weight');
    let x = acts.layers[0]?.xIn ?? acts.xOut;
    for (let b = 0; b < rows; b++) {
      for (let t = 0; t < seq; t++) {
        const id = batch[b * (seq + 1) + t] as number;
        x.set(emb.subarray(id * E, id * E + E), (b * seq + t) * E);
      }
    }
    for (let l = 0; l < s.layers; l++) {
      const la = acts.layers[l] as LayerActs;
      if (la.xIn !== x) la.xIn.set(x);
      this.layerForward(l, la, rows, seq);
      x = acts.layers[l + 1]?.xIn ?? acts.xOut;
      x.set(la.xMid);
      this.gemm.nt(la.a, this.get(`blk.${l}.ffn_down.weight`), x, n, E, s.ff, true);
    }
    this.ops.rmsNormForward(acts.xOut, this.get('output_norm.weight'), LLAMA_EPS, acts.hf, acts.rf, n);
    this.gemm.nt(acts.hf, this.get('output.weight'), acts.logits, n, s.vocab, E);
    return acts;
  }

  /** One layer up to the FFN's product (which forward adds into the next residual). */
  private layerForward(l: number, la: LayerActs, rows: number, seq: number): void {
    const s = this.layout.shape;
    const n = rows * seq;
    const E = s.embd;
    const Q = s.heads * s.headDim;
    const K = s.kvHeads * s.headDim;
    const p = `blk.${l}.`;
    const rope = this.rope as RopeTable;
    const ops = this.ops;
    ops.rmsNormForward(la.xIn, this.get(`${p}attn_norm.weight`), LLAMA_EPS, la.h1, la.r1, n);
    this.gemm.nt(la.h1, this.get(`${p}attn_q.weight`), la.q, n, Q, E);
    this.gemm.nt(la.h1, this.get(`${p}attn_k.weight`), la.k, n, K, E);
    this.gemm.nt(la.h1, this.get(`${p}attn_v.weight`), la.v, n, K, E);
    ops.ropeApply(la.q, rope, rows, seq, s.heads, 1);
    ops.ropeApply(la.k, rope, rows, seq, s.kvHeads, 1);
    ops.attentionForward(this.attnShape(rows, seq), la.q, la.k, la.v, la.o, la.probs);
    la.xMid.set(la.xIn);
    this.gemm.nt(la.o, this.get(`${p}attn_output.weight`), la.xMid, n, E, Q, true);
    ops.rmsNormForward(la.xMid, this.get(`${p}ffn_norm.weight`), LLAMA_EPS, la.h2, la.r2, n);
    this.gemm.nt(la.h2, this.get(`${p}ffn_gate.weight`), la.g, n, s.ff, E);
    this.gemm.nt(la.h2, this.get(`${p}ffn_up.weight`), la.u, n, s.ff, E);
    ops.swigluForward(la.g, la.u, la.a);
  }

  /** Mean cross-entropy of a batch (forward only), in nats per token. */
  loss(batch: ArrayLike<number>, rows: number, seq: number): number {
    const acts = this.forward(batch, rows, seq);
    return crossEntropyLoss(acts.logits, targetsOf(batch, rows, seq), rows * seq, this.layout.shape.vocab);
  }

  /**
   * Forward and backward: adds d(loss)/d(weights) into `grad`, where loss is the sum of the
   * batch's token losses divided by `denominator` (default: its own token count; data-parallel
   * ranks pass the global count so that their gradients sum to the global mean's). Returns
   * that loss. `onReady` hears each range as its gradients become final.
   */
  step(
    batch: ArrayLike<number>,
    rows: number,
    seq: number,
    grad: Float32Array,
    denominator = rows * seq,
    onReady?: GradReady,
  ): number {
    const pass = this.backwardPass(batch, rows, seq, grad, denominator, onReady);
    let next = pass.next();
    while (!next.done) next = pass.next();
    return next.value;
  }

  /**
   * step(), yielding to the event loop after each announced range, so that reductions
   * started by `onReady` progress while the rest of the backward runs (data-parallel overlap).
   */
  async stepAsync(
    batch: ArrayLike<number>,
    rows: number,
    seq: number,
    grad: Float32Array,
    denominator: number,
    onReady: GradReady,
  ): Promise<number> {
    const pass = this.backwardPass(batch, rows, seq, grad, denominator, onReady);
    let next = pass.next();
    while (!next.done) {
      await new Promise((r) => setImmediate(r));
      next = pass.next();
    }
    return next.value;
  }

  /** Forward, then the backward in pieces: it yields after announcing each range, returns the loss. */
  private *backwardPass(
    batch: ArrayLike<number>,
    rows: number,
    seq: number,
    grad: Float32Array,
    denominator: number,
    onReady: GradReady | undefined,
  ): Generator<void, number, void> {
    const s = this.layout.shape;
    const n = rows * seq;
    const acts = this.forward(batch, rows, seq);
    const loss = this.ops.crossEntropyInPlace(
      acts.logits,
      targetsOf(batch, rows, seq),
      n,
      s.vocab,
      denominator,
    );
    const g = views(this.layout, grad);
    const dl = acts.logits;
    const E = s.embd;
    this.gemm.tn(dl, acts.hf, g.get('output.weight') as Float32Array, s.vocab, E, n, true);
    const { dh, dx } = this.scratch as GradScratch;
    this.gemm.nn(dl, this.get('output.weight'), dh, n, E, s.vocab);
    this.ops.rmsNormBackward(
      acts.xOut,
      this.get('output_norm.weight'),
      acts.rf,
      dh,
      dx,
      g.get('output_norm.weight') as Float32Array,
      n,
    );
    this.announce(onReady, 'output_norm.weight', 'output.weight');
    yield;
    for (let l = s.layers - 1; l >= 0; l--) {
      this.layerBackward(l, acts.layers[l] as LayerActs, rows, seq, dx, g);
      this.announce(onReady, `blk.${l}.attn_norm.weight`, `blk.${l}.ffn_down.weight`);
      yield;
    }
    const de = g.get('token_embd.weight') as Float32Array;
    for (let b = 0; b < rows; b++) {
      for (let t = 0; t < seq; t++) {
        const id = batch[b * (seq + 1) + t] as number;
        const src = (b * seq + t) * E;
        for (let i = 0; i < E; i++) de[id * E + i] = (de[id * E + i] as number) + (dx[src + i] as number);
      }
    }
    this.announce(onReady, 'token_embd.weight', 'token_embd.weight');
    return loss;
  }

  private announce(onReady: GradReady | undefined, first: string, last: string): void {
    if (!onReady) return;
    const a = this.layout.byName.get(first);
    const b = this.layout.byName.get(last);
    if (a && b) onReady(a.offset, b.offset + b.size);
  }

  /** dx: d(loss)/d(residual leaving layer l) in, d(loss)/d(residual entering it) out. */
  private layerBackward(
    l: number,
    la: LayerActs,
    rows: number,
    seq: number,
    dx: Float32Array,
    g: Map<string, Float32Array>,
  ): void {
    const s = this.layout.shape;
    const n = rows * seq;
    const E = s.embd;
    const F = s.ff;
    const Q = s.heads * s.headDim;
    const K = s.kvHeads * s.headDim;
    const p = `blk.${l}.`;
    const gw = (name: string): Float32Array => g.get(p + name) as Float32Array;
    const ops = this.ops;
    const { da, dg, du, dh, dr: scratch, dout, dq, dk, dv } = this.scratch as GradScratch;
    // FFN: x += down(swiglu(gate h2, up h2)), h2 = ffn_norm(xMid)
    this.gemm.tn(dx, la.a, gw('ffn_down.weight'), E, F, n, true);
    this.gemm.nn(dx, this.get(`${p}ffn_down.weight`), da, n, F, E);
    ops.swigluBackward(la.g, la.u, da, dg, du);
    this.gemm.tn(dg, la.h2, gw('ffn_gate.weight'), F, E, n, true);
    this.gemm.tn(du, la.h2, gw('ffn_up.weight'), F, E, n, true);
    this.gemm.nn(dg, this.get(`${p}ffn_gate.weight`), dh, n, E, F);
    this.gemm.nn(du, this.get(`${p}ffn_up.weight`), dh, n, E, F, true);
    ops.rmsNormBackward(
      la.xMid,
      this.get(`${p}ffn_norm.weight`),
      la.r2,
      dh,
      scratch,
      gw('ffn_norm.weight'),
      n,
    );
    ops.add(dx, scratch);
    // attention: xMid = xIn + o W_o^T, o = attention(rope(q), rope(k), v) of h1 = attn_norm(xIn)
    this.gemm.tn(dx, la.o, gw('attn_output.weight'), E, Q, n, true);
    this.gemm.nn(dx, this.get(`${p}attn_output.weight`), dout, n, Q, E);
    ops.attentionBackward(this.attnShape(rows, seq), la.q, la.k, la.v, la.probs, dout, dq, dk, dv);
    const rope = this.rope as RopeTable;
    ops.ropeApply(dq, rope, rows, seq, s.heads, -1);
    ops.ropeApply(dk, rope, rows, seq, s.kvHeads, -1);
    this.gemm.tn(dq, la.h1, gw('attn_q.weight'), Q, E, n, true);
    this.gemm.tn(dk, la.h1, gw('attn_k.weight'), K, E, n, true);
    this.gemm.tn(dv, la.h1, gw('attn_v.weight'), K, E, n, true);
    this.gemm.nn(dq, this.get(`${p}attn_q.weight`), dh, n, E, Q);
    this.gemm.nn(dk, this.get(`${p}attn_k.weight`), dh, n, E, K, true);
    this.gemm.nn(dv, this.get(`${p}attn_v.weight`), dh, n, E, K, true);
    ops.rmsNormBackward(
      la.xIn,
      this.get(`${p}attn_norm.weight`),
      la.r1,
      dh,
      scratch,
      gw('attn_norm.weight'),
      n,
    );
    ops.add(dx, scratch);
  }
}

/** Targets of a rows x (seq + 1) batch: each row's tokens 1..seq. */
export function targetsOf(batch: ArrayLike<number>, rows: number, seq: number): Int32Array {
  const out = new Int32Array(rows * seq);
  for (let b = 0; b < rows; b++)
    for (let t = 0; t < seq; t++) out[b * seq + t] = batch[b * (seq + 1) + t + 1] as number;
  return out;
}
