import { Rng } from '../format/random-weights.js';
import type { ModelShape } from '../format/model-plan.js';

/**
 * A llama's trainable tensors in one flat f32 buffer, each a view of a contiguous range, in
 * GGUF's names and make-model's order (token_embd, blk.0 ... blk.L-1, output_norm, output).
 * A matrix is row-major [rows, cols] = PyTorch's [out, in] = ggml's dims [cols, rows], so the
 * bytes of a view are the F32 tensor's bytes in the file. One buffer lets the optimizer,
 * the checkpoint and the gradient all-reduce treat the model as ranges of one array.
 */
export interface ParamEntry {
  name: string;
  /** [rows, cols]; a vector is [1, cols]. */
  rows: number;
  cols: number;
  offset: number;
  size: number;
  /** Norm weights: no weight decay (as PyTorch recipes leave 1-D tensors undecayed). */
  decay: boolean;
}

/** A range [start, end) of the flat parameter buffer (and of the gradient and moments beside it). */
export type FlatRange = readonly [start: number, end: number];

export interface ParamLayout {
  shape: ModelShape;
  entries: ParamEntry[];
  total: number;
  byName: ReadonlyMap<string, ParamEntry>;
}

export function paramLayout(shape: ModelShape): ParamLayout {
  const q = shape.heads * shape.headDim;
  const kv = shape.kvHeads * shape.headDim;
  const list: [string, number, number][] = [['token_embd.weight', shape.vocab, shape.embd]];
  for (let i = 0; i < shape.layers; i++) {
    const p = `blk.${i}.`;
    list.push(
      [`${p}attn_norm.weight`, 1, shape.embd],
      [`${p}attn_q.weight`, q, shape.embd],
      [`${p}attn_k.weight`, kv, shape.embd],
      [`${p}attn_v.weight`, kv, shape.embd],
      [`${p}attn_output.weight`, shape.embd, q],
      [`${p}ffn_norm.weight`, 1, shape.embd],
      [`${p}ffn_gate.weight`, shape.ff, shape.embd],
      [`${p}ffn_up.weight`, shape.ff, shape.embd],
      [`${p}ffn_down.weight`, shape.embd, shape.ff],
    );
  }
  list.push(['output_norm.weight', 1, shape.embd], ['output.weight', shape.vocab, shape.embd]);
  let offset = 0;
  const entries = list.map(([name, rows, cols]): ParamEntry => {
    const e = { name, rows, cols, offset, size: rows * cols, decay: rows > 1 };
    offset += e.size;
    return e;
  });
  return { shape, entries, total: offset, byName: new Map(entries.map((e) => [e.name, e])) };
}

/** The views of one flat buffer (weights, gradients or optimizer moments) by tensor name. */
export function views(layout: ParamLayout, flat: Float32Array): Map<string, Float32Array> {
  return new Map(layout.entries.map((e) => [e.name, flat.subarray(e.offset, e.offset + e.size)]));
}

/**
 * Initial weights, a pure function of (shape, seed): matrices N(0, 0.02), norms 1, the
 * residual projections (attn_output, ffn_down) scaled by 1 / sqrt(2 layers) (GPT-2's init,
 * as bench/trained/train.py does).
 */
export function initParams(layout: ParamLayout, seed: number): Float32Array {
  const flat = new Float32Array(layout.total);
  const rng = new Rng(seed);
  const residual = 1 / Math.sqrt(2 * layout.shape.layers);
  for (const e of layout.entries) {
    const v = flat.subarray(e.offset, e.offset + e.size);
    if (!e.decay) v.fill(1);
    else rng.fillNormal(v, 0, /(attn_output|ffn_down)\.weight$/.test(e.name) ? 0.02 * residual : 0.02);
  }
  return flat;
}
