import type { ModelArch } from './config.js';
import { MemoryModelFile, type TensorEntry } from './model-file.js';

export interface TinyModelOptions {
  arch: ModelArch;
  vocab?: number;
  width?: number;
  layers?: number;
  heads?: number;
  kvHeads?: number;
  headDim?: number;
  ff?: number;
  experts?: number;
  expertsUsed?: number;
  sharedFf?: number;
  tied?: boolean;
  context?: number;
  seed?: number;
  ropeFreqBase?: number;
  /** Adds a `rope_freqs.weight` tensor of per-frequency divisors in [1, 8) (Llama 3 style). */
  ropeFreqs?: boolean;
}

/** Deterministic uniform values in [-scale, scale) (mulberry32). */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A small model with random F32 weights held in memory, in the GGUF tensor layout of its
 * architecture: for unit tests of the model code and of sharding, no file needed.
 */
export function tinyModelFile(o: TinyModelOptions): MemoryModelFile {
  const vocab = o.vocab ?? 64;
  const width = o.width ?? 32;
  const layers = o.layers ?? 2;
  const heads = o.heads ?? 4;
  const kvHeads = o.kvHeads ?? 2;
  const hd = o.headDim ?? width / heads;
  const ff = o.ff ?? 48;
  const moe = o.arch === 'qwen2moe' || o.arch === 'qwen3moe' || (o.experts ?? 0) > 0;
  const experts = moe ? (o.experts ?? 4) : 0;
  const sharedFf = o.arch === 'qwen2moe' ? (o.sharedFf ?? 40) : 0;
  const next = random(o.seed ?? 1);
  const tensors = new Map<string, TensorEntry & { data: Uint8Array }>();
  const add = (name: string, dims: number[], scale: number, offset = 0): void => {
    const count = dims.reduce((a, b) => a * b, 1);
    const values = new Float32Array(count);
    for (let i = 0; i < count; i++) values[i] = offset + (next() * 2 - 1) * scale;
    tensors.set(name, { type: 0, dims, data: new Uint8Array(values.buffer) });
  };
  // Matrices get unit gain (uniform with variance 1 / cols), so activations stay O(1) through
  // the layers; the output head a larger gain, so logits are well spread.
  const matrix = (name: string, dims: number[], gain = 1): void =>
    add(name, dims, gain * Math.sqrt(3 / (dims[0] as number)));
  const a = o.arch;
  add('token_embd.weight', [width, vocab], 1);
  add('output_norm.weight', [width], 0.2, 1);
  if (!o.tied) matrix('output.weight', [width, vocab], 4);
  if (o.ropeFreqs) add('rope_freqs.weight', [hd / 2], 3.5, 4.5);
  for (let l = 0; l < layers; l++) {
    const p = `blk.${l}.`;
    add(`${p}attn_norm.weight`, [width], 0.2, 1);
    matrix(`${p}attn_q.weight`, [width, heads * hd]);
    matrix(`${p}attn_k.weight`, [width, kvHeads * hd]);
    matrix(`${p}attn_v.weight`, [width, kvHeads * hd]);
    matrix(`${p}attn_output.weight`, [heads * hd, width]);
    if (a === 'qwen2' || a === 'qwen2moe') {
      add(`${p}attn_q.bias`, [heads * hd], 0.2);
      add(`${p}attn_k.bias`, [kvHeads * hd], 0.2);
      add(`${p}attn_v.bias`, [kvHeads * hd], 0.2);
    }
    if (a === 'qwen3' || a === 'qwen3moe') {
      add(`${p}attn_q_norm.weight`, [hd], 0.2, 1);
      add(`${p}attn_k_norm.weight`, [hd], 0.2, 1);
    }
    add(`${p}ffn_norm.weight`, [width], 0.2, 1);
    if (moe) {
      matrix(`${p}ffn_gate_inp.weight`, [width, experts], 2);
      matrix(`${p}ffn_gate_exps.weight`, [width, ff, experts]);
      matrix(`${p}ffn_up_exps.weight`, [width, ff, experts]);
      matrix(`${p}ffn_down_exps.weight`, [ff, width, experts]);
      if (sharedFf > 0) {
        add(`${p}ffn_gate_inp_shexp.weight`, [width], 0.3);
        matrix(`${p}ffn_gate_shexp.weight`, [width, sharedFf]);
        matrix(`${p}ffn_up_shexp.weight`, [width, sharedFf]);
        matrix(`${p}ffn_down_shexp.weight`, [sharedFf, width]);
      }
    } else {
      matrix(`${p}ffn_gate.weight`, [width, ff]);
      matrix(`${p}ffn_up.weight`, [width, ff]);
      matrix(`${p}ffn_down.weight`, [ff, width]);
    }
  }
  const meta = new Map<string, unknown>([
    ['general.architecture', a],
    [`${a}.context_length`, o.context ?? 128],
    [`${a}.embedding_length`, width],
    [`${a}.block_count`, layers],
    [`${a}.feed_forward_length`, ff],
    [`${a}.attention.head_count`, heads],
    [`${a}.attention.head_count_kv`, kvHeads],
    [`${a}.attention.key_length`, hd],
    [`${a}.attention.value_length`, hd],
    [`${a}.attention.layer_norm_rms_epsilon`, 1e-5],
    [`${a}.rope.freq_base`, o.ropeFreqBase ?? 10000],
    [`${a}.vocab_size`, vocab],
  ]);
  if (moe) {
    meta.set(`${a}.expert_count`, experts);
    meta.set(`${a}.expert_used_count`, o.expertsUsed ?? 2);
    meta.set(`${a}.expert_feed_forward_length`, ff);
    if (sharedFf > 0) meta.set(`${a}.expert_shared_feed_forward_length`, sharedFf);
  }
  return new MemoryModelFile(meta, tensors);
}
