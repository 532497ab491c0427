import { performance } from 'node:perf_hooks';
import { MemoryModelFile, Model, type TensorEntry } from '../engine/index.js';
import { f32ToF16, GgmlType, rowBytes, type Kernels } from '../kernels/index.js';
import type { PrefillShape } from '../parallel/index.js';

// The prefill probe: a two-layer Llama model at a real model's layer shapes (Q8_0 weights,
// synthetic values, a 256-token vocabulary), whose forward of `tokens` prompt tokens runs the
// engine's own calls (the fused gate/up GEMM, the row-parallel projections cut into leaves,
// causal attention over the prompt, norms, RoPE, the KV store, the JS between them) on the
// kernels under test. Timing each kernel call splits a layer's time into three terms:
// the GEMMs (their rate at these shapes and this many tokens), attention (grows with T^2)
// and the rest (per token: elementwise work, stores, the calls' hand-offs to worker threads).

/** TinyLlama-1.1B's layer at `bench model`'s default prompt: the shape `tandem plan --calibrate` probes. */
export const DEFAULT_PREFILL_SHAPE: PrefillShape = {
  hidden: 2048,
  heads: 32,
  kvHeads: 4,
  headDim: 64,
  ff: 5632,
  tokens: 128,
};

const PROBE_LAYERS = 2;
const PROBE_VOCAB = 256;
/** Forwards of one sample run until this many ms have passed (at least one). */
const SAMPLE_MS = 200;

/** Whether every matrix of `s` fills whole Q8_0 blocks (32 values a row), as the probe's weights must. */
export function probeable(s: PrefillShape): boolean {
  return [s.hidden, s.heads * s.headDim, s.kvHeads * s.headDim, s.ff].every((n) => n > 0 && n % 32 === 0);
}

/** Parameters a layer of `s` multiplies each token by in its GEMMs. */
export function layerGemmParams(s: PrefillShape): number {
  return 2 * s.hidden * s.heads * s.headDim + 2 * s.hidden * s.kvHeads * s.headDim + 3 * s.hidden * s.ff;
}

/** FLOPs of a layer's causal attention over T prompt tokens (QK^T and PV over T^2 / 2 pairs each). */
export function attentionFlops(s: Pick<PrefillShape, 'heads' | 'headDim'>, tokens: number): number {
  return 2 * s.heads * s.headDim * tokens * tokens;
}

/** A `rows` x `cols` Q8_0 matrix: f16 scales of 1 / (64 sqrt(cols)), quants spread over [-63, 63]. */
function q8Matrix(rows: number, cols: number): Uint8Array {
  const blocks = (rows * cols) / 32;
  const data = new Uint8Array(rows * rowBytes(GgmlType.Q8_0, cols));
  const scale = f32ToF16(1 / (64 * Math.sqrt(cols)));
  for (let b = 0; b < blocks; b++) {
    const o = b * 34;
    data[o] = scale & 0xff;
    data[o + 1] = scale >>> 8;
    for (let i = 0; i < 32; i++) data[o + 2 + i] = ((b * 7 + i * 29) % 127) - 63;
  }
  return data;
}

/**
 * A probe's model file: `layers` layers of shape `s` (every matrix Q8_0, the same bytes in each
 * layer; the kernels copy each layer's into memory of its own) holding `context` positions.
 */
export function probeFile(s: PrefillShape, layers = PROBE_LAYERS, context = s.tokens + 8): MemoryModelFile {
  const tensors = new Map<string, TensorEntry & { data: Uint8Array }>();
  const q8 = (name: string, cols: number, rows: number): void => {
    tensors.set(name, { type: GgmlType.Q8_0, dims: [cols, rows], data: q8Matrix(rows, cols) });
  };
  const ones = (name: string, n: number): void => {
    tensors.set(name, {
      type: GgmlType.F32,
      dims: [n],
      data: new Uint8Array(new Float32Array(n).fill(1).buffer),
    });
  };
  const h = s.hidden;
  q8('token_embd.weight', h, PROBE_VOCAB);
  q8('output.weight', h, PROBE_VOCAB);
  ones('output_norm.weight', h);
  const shared = new Map<string, Uint8Array>();
  const matrix = (name: string, cols: number, rows: number): void => {
    const key = `${cols}x${rows}`;
    if (!shared.has(key)) shared.set(key, q8Matrix(rows, cols));
    tensors.set(name, { type: GgmlType.Q8_0, dims: [cols, rows], data: shared.get(key)! });
  };
  for (let l = 0; l < layers; l++) {
    const p = `blk.${l}.`;
    ones(`${p}attn_norm.weight`, h);
    ones(`${p}ffn_norm.weight`, h);
    matrix(`${p}attn_q.weight`, h, s.heads * s.headDim);
    matrix(`${p}attn_k.weight`, h, s.kvHeads * s.headDim);
    matrix(`${p}attn_v.weight`, h, s.kvHeads * s.headDim);
    matrix(`${p}attn_output.weight`, s.heads * s.headDim, h);
    matrix(`${p}ffn_gate.weight`, h, s.ff);
    matrix(`${p}ffn_up.weight`, h, s.ff);
    matrix(`${p}ffn_down.weight`, s.ff, h);
  }
  const meta = new Map<string, unknown>([
    ['general.architecture', 'llama'],
    ['llama.context_length', context],
    ['llama.embedding_length', h],
    ['llama.block_count', layers],
    ['llama.feed_forward_length', s.ff],
    ['llama.attention.head_count', s.heads],
    ['llama.attention.head_count_kv', s.kvHeads],
    ['llama.attention.key_length', s.headDim],
    ['llama.attention.value_length', s.headDim],
    ['llama.attention.layer_norm_rms_epsilon', 1e-5],
    ['llama.rope.freq_base', 10000],
    ['llama.vocab_size', PROBE_VOCAB],
  ]);
  return new MemoryModelFile(meta, tensors);
}

/** One layer's prefill of the probe's prompt, ms: the GEMMs, attention, and everything else. */
export interface PrefillSample {
  gemmMs: number;
  attentionMs: number;
  otherMs: number;
}

const GEMM_CALLS = new Set(['matmul', 'matmulSwiglu', 'matmulPlusRows', 'matvec', 'matvecRows']);

/** Time spent in a probe's kernel calls, ms, and how many calls it made (every call is synchronous). */
export interface KernelTime {
  gemm: number;
  attention: number;
  calls: number;
}

/** Kernel methods that set up or tear down rather than compute a forward's step (not counted as calls). */
const SETUP_CALLS = new Set(['uploadWeight', 'releaseWeight', 'createKvCache', 'close']);

/** `k` with the time of its GEMM and attention calls added to `spent`, and its compute calls counted. */
export function timedKernels(k: Kernels, spent: KernelTime): Kernels {
  return new Proxy(k, {
    get(target, name, receiver) {
      const value: unknown = Reflect.get(target, name, receiver);
      if (typeof value !== 'function') return value;
      const call = value as (...a: unknown[]) => unknown;
      if (SETUP_CALLS.has(String(name))) return call.bind(target);
      const kind = name === 'attention' ? 'attention' : GEMM_CALLS.has(String(name)) ? 'gemm' : undefined;
      return (...a: unknown[]): unknown => {
        spent.calls++;
        if (!kind) return call.apply(target, a);
        const t0 = performance.now();
        const r = call.apply(target, a);
        spent[kind] += performance.now() - t0;
        return r;
      };
    },
  });
}

/** A sample as rates: the GEMMs' and attention's FLOP/s, and the rest in ms a layer per prompt token. */
export function prefillRates(
  sample: PrefillSample,
  s: PrefillShape,
): { gemmFlopsPerS: number; attentionFlopsPerS: number; layerTokenMs: number } {
  return {
    gemmFlopsPerS: (2 * layerGemmParams(s) * s.tokens) / (Math.max(1e-6, sample.gemmMs) / 1000),
    attentionFlopsPerS: attentionFlops(s, s.tokens) / (Math.max(1e-6, sample.attentionMs) / 1000),
    layerTokenMs: sample.otherMs / s.tokens,
  };
}

/** The probe loaded on `kernels`: each sample() runs forwards for SAMPLE_MS and returns their mean per layer. */
export interface PrefillProbe {
  readonly shape: PrefillShape;
  sample(): Promise<PrefillSample>;
}

export async function openPrefillProbe(kernels: Kernels, shape: PrefillShape): Promise<PrefillProbe> {
  const spent: KernelTime = { gemm: 0, attention: 0, calls: 0 };
  const model = await Model.load(probeFile(shape), timedKernels(kernels, spent));
  const prompt = Array.from({ length: shape.tokens }, (_, i) => (i * 37 + 1) % PROBE_VOCAB);
  const forward = async (): Promise<number> => {
    const cache = model.newSession({ contextLength: shape.tokens + 8 });
    const t0 = performance.now();
    await model.forward(prompt, cache);
    return performance.now() - t0;
  };
  await forward(); // compiles the paths and sizes the scratch buffers
  return {
    shape,
    async sample(): Promise<PrefillSample> {
      spent.gemm = spent.attention = 0;
      let total = 0;
      let runs = 0;
      while (runs === 0 || total < SAMPLE_MS) {
        total += await forward();
        runs++;
      }
      const per = runs * PROBE_LAYERS;
      return {
        gemmMs: spent.gemm / per,
        attentionMs: spent.attention / per,
        otherMs: Math.max(0, total - spent.gemm - spent.attention) / per,
      };
    },
  };
}
