import { TandemError } from '../../errors/index.js';
import { GgmlType, ggmlTypeInfo } from '../../kernels/quant/index.js';
import { gv } from './gguf-writer.js';
import type { GgufValue } from './gguf-types.js';
import { buildBpeVocab, buildSpmVocab, vocabMetadata, type Vocab } from './vocab.js';
import { zipfLogitOffsets, type RouterSkew } from './router-skew.js';

/** Architectures `make-model` writes: `moe` is Mixtral (the llama architecture with experts). */
export const modelArchs = ['llama', 'qwen2', 'qwen3', 'moe', 'qwen2moe', 'qwen3moe'] as const;
export type ModelArch = (typeof modelArchs)[number];

export interface ModelShape {
  layers: number;
  embd: number;
  ff: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  vocab: number;
  context: number;
  /** Mixture of experts (used by the MoE archs only). */
  experts: number;
  expertsUsed: number;
  expertFf: number;
  sharedFf: number;
}

export const modelShapes: Readonly<Record<string, ModelShape>> = {
  tiny: {
    layers: 2,
    embd: 256,
    ff: 512,
    heads: 4,
    kvHeads: 2,
    headDim: 64,
    vocab: 4096,
    context: 512,
    experts: 4,
    expertsUsed: 2,
    expertFf: 256,
    sharedFf: 256,
  },
  small: {
    layers: 4,
    embd: 512,
    ff: 1536,
    heads: 8,
    kvHeads: 4,
    headDim: 64,
    vocab: 8192,
    context: 1024,
    experts: 8,
    expertsUsed: 2,
    expertFf: 512,
    sharedFf: 512,
  },
  'tinyllama-1.1b': {
    layers: 22,
    embd: 2048,
    ff: 5632,
    heads: 32,
    kvHeads: 4,
    headDim: 64,
    vocab: 32000,
    context: 2048,
    experts: 8,
    expertsUsed: 2,
    expertFf: 1536,
    sharedFf: 1536,
  },
};

/** File types: what llama.cpp calls the ftype, with its general.file_type number. */
export const fileTypes = {
  f32: { id: 0, base: GgmlType.F32 },
  f16: { id: 1, base: GgmlType.F16 },
  bf16: { id: 32, base: GgmlType.BF16 },
  q8_0: { id: 7, base: GgmlType.Q8_0 },
  q4_0: { id: 2, base: GgmlType.Q4_0 },
  q4_k_m: { id: 15, base: GgmlType.Q4_K },
  q5_k_m: { id: 17, base: GgmlType.Q5_K },
  q6_k: { id: 18, base: GgmlType.Q6_K },
} as const;
export type FileTypeName = keyof typeof fileTypes;

/** How a tensor's values are drawn: weights N(0, std); norms 1 + N(0, 0.1); biases N(0, std); rope-llama3 the fixed Llama 3.1 frequency factors. */
export type Init = 'weight' | 'norm' | 'bias' | 'rope-llama3' | 'embedding-skew' | 'router-skew';

export interface PlannedTensor {
  name: string;
  dims: number[];
  type: number;
  init: Init;
  /** router-skew: each expert's logit offset, in units of the router's random spread (router-skew.ts). */
  offsets?: number[];
  /**
   * A skewed MoE keeps the residual's first `routing` coordinates for the routers alone
   * (random-weights.ts): 'in' zeroes what reads them, 'out' what writes them, 'unit' weighs
   * them by 1 in a residual norm.
   */
  isolate?: 'in' | 'out' | 'unit';
  /** A skewed MoE: how many residual coordinates route (set on every tensor that touches them). */
  routing?: number;
}

export interface ModelPlanOptions {
  arch: ModelArch;
  shape: ModelShape;
  type: FileTypeName;
  vocab: 'spm' | 'bpe';
  tied: boolean;
  seed: number;
  /** `llama3`: Llama 3.1 RoPE scaling (rope_freqs.weight, freq base 500000); llama and moe only. */
  ropeScaling?: 'none' | 'llama3';
  name?: string;
  /** MoE only: routing that follows Zipf(s) over the experts (router-skew.ts). */
  routerSkew?: RouterSkew;
}

export interface ModelPlan {
  metadata: Map<string, GgufValue>;
  tensors: PlannedTensor[];
  vocab: Vocab;
  params: number;
}

const isMoe = (a: ModelArch): boolean => a === 'moe' || a === 'qwen2moe' || a === 'qwen3moe';
/** llama.cpp's architecture name. */
export const ggufArch = (a: ModelArch): string => (a === 'moe' ? 'llama' : a);

/** The router offsets of a skewed MoE plan; a dense architecture cannot take a skew. */
function skewOffsets(o: ModelPlanOptions, s: ModelShape, moe: boolean): number[] {
  if (!moe)
    throw new TandemError(
      'MODEL_FORMAT_UNSUPPORTED',
      `--router-skew applies to mixtures of experts, not ${o.arch}`,
      {
        hint: 'use --arch moe, qwen2moe or qwen3moe, or drop --router-skew',
      },
    );
  return zipfLogitOffsets(s.experts, s.expertsUsed, o.routerSkew!.s, o.seed);
}

/** llama.cpp's use_more_bits: the first and last eighth of layers, and every third in between. */
function useMoreBits(i: number, n: number): boolean {
  return i < Math.floor(n / 8) || i >= Math.floor((7 * n) / 8) || (i - Math.floor(n / 8)) % 3 === 2;
}

/**
 * The ggml type of a tensor in a file of type `ft`, following llama.cpp's quantizer:
 * 1-D tensors and the expert router stay F32; the output matrix gets Q6_K (except in
 * F32/F16/BF16/Q8_0/Q6_K files); Q4_K_M and Q5_K_M give attn_v and ffn_down Q6_K on the
 * layers use_more_bits picks. A k-quant tensor whose rows are not whole 256-value blocks
 * falls back to Q8_0 (llama.cpp would pick Q5_0/Q5_1/Q8_0; tandem writes only Q8_0).
 */
export function tensorType(
  name: string,
  dims: readonly number[],
  ft: FileTypeName,
  layers: number,
  experts: number,
  isOutput: boolean,
): number {
  if (dims.length < 2 || name.includes('ffn_gate_inp')) return GgmlType.F32;
  const { base } = fileTypes[ft];
  let type: number = base;
  const layer = Number(/^blk\.(\d+)\./.exec(name)?.[1] ?? -1);
  const kMix = ft === 'q4_k_m' || ft === 'q5_k_m';
  if (isOutput) {
    if (ft === 'q4_0' || kMix) type = GgmlType.Q6_K;
  } else if (kMix && name.endsWith('attn_v.weight')) {
    type = experts === 8 ? GgmlType.Q8_0 : useMoreBits(layer, layers) ? GgmlType.Q6_K : base;
  } else if (kMix && name.includes('ffn_down') && useMoreBits(layer, layers)) {
    type = GgmlType.Q6_K;
  } else if (ft === 'q4_k_m' && experts === 8 && name.endsWith('attn_output.weight')) {
    type = GgmlType.Q5_K;
  }
  const info = ggmlTypeInfo(type)!;
  if ((dims[0] as number) % info.blockSize !== 0)
    type = (dims[0] as number) % 32 === 0 ? GgmlType.Q8_0 : GgmlType.F16;
  return type;
}

function checkShape(arch: ModelArch, s: ModelShape, type: FileTypeName): void {
  const problems: string[] = [];
  if (s.heads % s.kvHeads !== 0) problems.push(`heads ${s.heads} is not a multiple of kv heads ${s.kvHeads}`);
  if (s.headDim % 2 !== 0) problems.push(`head dim ${s.headDim} is odd (RoPE rotates pairs)`);
  if (isMoe(arch) && !(s.expertsUsed >= 1 && s.expertsUsed <= s.experts))
    problems.push(`experts used ${s.expertsUsed} is not in 1..${s.experts}`);
  if (s.vocab < 512) problems.push(`vocab ${s.vocab} is below 512 (the byte tokens alone take 259)`);
  const block = type.startsWith('q') ? 32 : 1;
  if (s.embd % block !== 0)
    problems.push(`embedding ${s.embd} is not a multiple of ${block} (needed by ${type})`);
  if (problems.length) {
    throw new TandemError(
      'MODEL_FORMAT_UNSUPPORTED',
      `cannot make a ${arch} model of this shape: ${problems.join('; ')}`,
      { hint: 'pick a shape from --shape or fix its numbers' },
    );
  }
}

function archMetadata(arch: ModelArch, s: ModelShape): [string, GgufValue][] {
  const a = ggufArch(arch);
  const qwen = arch.startsWith('qwen');
  const moe = isMoe(arch);
  const out: [string, GgufValue][] = [
    [`${a}.context_length`, gv.u32(s.context)],
    [`${a}.embedding_length`, gv.u32(s.embd)],
    [`${a}.block_count`, gv.u32(s.layers)],
    [`${a}.feed_forward_length`, gv.u32(arch === 'moe' ? s.expertFf : s.ff)],
    [`${a}.attention.head_count`, gv.u32(s.heads)],
    [`${a}.attention.head_count_kv`, gv.u32(s.kvHeads)],
    [`${a}.attention.layer_norm_rms_epsilon`, gv.f32(qwen ? 1e-6 : 1e-5)],
    [`${a}.rope.freq_base`, gv.f32(qwen ? 1000000 : 10000)],
    [`${a}.rope.dimension_count`, gv.u32(s.headDim)],
    [`${a}.vocab_size`, gv.u32(s.vocab)],
  ];
  if (arch === 'qwen3' || arch === 'qwen3moe' || s.headDim * s.heads !== s.embd) {
    out.push(
      [`${a}.attention.key_length`, gv.u32(s.headDim)],
      [`${a}.attention.value_length`, gv.u32(s.headDim)],
    );
  }
  if (moe)
    out.push([`${a}.expert_count`, gv.u32(s.experts)], [`${a}.expert_used_count`, gv.u32(s.expertsUsed)]);
  if (arch === 'qwen2moe' || arch === 'qwen3moe')
    out.push([`${a}.expert_feed_forward_length`, gv.u32(s.expertFf)]);
  if (arch === 'qwen2moe') out.push([`${a}.expert_shared_feed_forward_length`, gv.u32(s.sharedFf)]);
  return out;
}

function layerTensors(arch: ModelArch, s: ModelShape, i: number): [string, number[], Init][] {
  const p = `blk.${i}.`;
  const q = s.heads * s.headDim;
  const kv = s.kvHeads * s.headDim;
  const t: [string, number[], Init][] = [[`${p}attn_norm.weight`, [s.embd], 'norm']];
  t.push(
    [`${p}attn_q.weight`, [s.embd, q], 'weight'],
    [`${p}attn_k.weight`, [s.embd, kv], 'weight'],
    [`${p}attn_v.weight`, [s.embd, kv], 'weight'],
  );
  if (arch === 'qwen2' || arch === 'qwen2moe')
    t.push(
      [`${p}attn_q.bias`, [q], 'bias'],
      [`${p}attn_k.bias`, [kv], 'bias'],
      [`${p}attn_v.bias`, [kv], 'bias'],
    );
  if (arch === 'qwen3' || arch === 'qwen3moe')
    t.push([`${p}attn_q_norm.weight`, [s.headDim], 'norm'], [`${p}attn_k_norm.weight`, [s.headDim], 'norm']);
  t.push([`${p}attn_output.weight`, [q, s.embd], 'weight'], [`${p}ffn_norm.weight`, [s.embd], 'norm']);
  if (!isMoe(arch)) {
    t.push(
      [`${p}ffn_gate.weight`, [s.embd, s.ff], 'weight'],
      [`${p}ffn_up.weight`, [s.embd, s.ff], 'weight'],
      [`${p}ffn_down.weight`, [s.ff, s.embd], 'weight'],
    );
    return t;
  }
  t.push(
    [`${p}ffn_gate_inp.weight`, [s.embd, s.experts], 'weight'],
    [`${p}ffn_gate_exps.weight`, [s.embd, s.expertFf, s.experts], 'weight'],
    [`${p}ffn_up_exps.weight`, [s.embd, s.expertFf, s.experts], 'weight'],
    [`${p}ffn_down_exps.weight`, [s.expertFf, s.embd, s.experts], 'weight'],
  );
  if (arch === 'qwen2moe') {
    t.push(
      [`${p}ffn_gate_inp_shexp.weight`, [s.embd], 'weight'],
      [`${p}ffn_gate_shexp.weight`, [s.embd, s.sharedFf], 'weight'],
      [`${p}ffn_up_shexp.weight`, [s.embd, s.sharedFf], 'weight'],
      [`${p}ffn_down_shexp.weight`, [s.sharedFf, s.embd], 'weight'],
    );
  }
  return t;
}

/** Llama 3.1's RoPE scaling parameters (its config.json rope_scaling). */
export const LLAMA3_ROPE = {
  base: 500000,
  factor: 8,
  lowFreqFactor: 1,
  highFreqFactor: 4,
  originalContext: 8192,
};

/**
 * Llama 3.1's per-frequency divisors for RoPE (what llama.cpp reads from rope_freqs.weight):
 * 1 for short wavelengths, `factor` for long ones, a smooth blend between.
 */
export function llama3RopeFactors(headDim: number, p = LLAMA3_ROPE): Float32Array {
  const lowWavelen = p.originalContext / p.lowFreqFactor;
  const highWavelen = p.originalContext / p.highFreqFactor;
  const out = new Float32Array(headDim / 2);
  for (let i = 0; i < out.length; i++) {
    const freq = p.base ** (-(2 * i) / headDim);
    const wavelen = (2 * Math.PI) / freq;
    if (wavelen < highWavelen) out[i] = 1;
    else if (wavelen > lowWavelen) out[i] = p.factor;
    else {
      const smooth = (p.originalContext / wavelen - p.lowFreqFactor) / (p.highFreqFactor - p.lowFreqFactor);
      out[i] = 1 / ((1 - smooth) / p.factor + smooth);
    }
  }
  return out;
}

const vocabCache = new Map<string, Vocab>();

/** Vocabularies are pure functions of their parameters and take a moment to learn: build each once. */
function cachedVocab(kind: 'spm' | 'bpe', size: number, pre: 'llama-bpe' | 'qwen2'): Vocab {
  const key = `${kind}/${size}/${kind === 'bpe' ? pre : ''}`;
  let v = vocabCache.get(key);
  if (v === undefined) {
    v = kind === 'spm' ? buildSpmVocab(size) : buildBpeVocab(size, pre);
    vocabCache.set(key, v);
  }
  return v;
}

/** Everything a generated model file holds, except the weights' values. */
export function planModel(o: ModelPlanOptions): ModelPlan {
  const s = o.shape;
  checkShape(o.arch, s, o.type);
  const vocab = cachedVocab(o.vocab, s.vocab, o.arch.startsWith('qwen') ? 'qwen2' : 'llama-bpe');
  const moe = isMoe(o.arch);
  const name = o.name ?? `tandem-random-${o.arch}-${o.type}`;
  const metadata = new Map<string, GgufValue>([
    ['general.architecture', gv.str(ggufArch(o.arch))],
    ['general.name', gv.str(name)],
    [
      'general.description',
      gv.str(
        `RANDOM WEIGHTS (seed ${o.seed}) with a real ${o.arch} layout, written by tandem make-model for tests, demos and benchmarks; it produces no meaningful text`,
      ),
    ],
    ['general.file_type', gv.u32(fileTypes[o.type].id)],
  ]);
  if (o.type !== 'f32' && o.type !== 'f16' && o.type !== 'bf16')
    metadata.set('general.quantization_version', gv.u32(2));
  for (const [k, v] of archMetadata(o.arch, s)) metadata.set(k, v);
  if (o.ropeScaling === 'llama3') {
    if (ggufArch(o.arch) !== 'llama') {
      throw new TandemError(
        'MODEL_FORMAT_UNSUPPORTED',
        `Llama 3 RoPE scaling applies to the llama and moe architectures, not ${o.arch}`,
        { hint: 'drop --rope-scaling or use --arch llama' },
      );
    }
    metadata.set('llama.rope.freq_base', gv.f32(LLAMA3_ROPE.base));
  }
  for (const [k, v] of vocabMetadata(vocab)) metadata.set(k, v);
  const raw: [string, number[], Init][] = [['token_embd.weight', [s.embd, s.vocab], 'weight']];
  for (let i = 0; i < s.layers; i++) raw.push(...layerTensors(o.arch, s, i));
  raw.push(['output_norm.weight', [s.embd], 'norm']);
  if (!o.tied) raw.push(['output.weight', [s.embd, s.vocab], 'weight']);
  if (o.ropeScaling === 'llama3') raw.unshift(['rope_freqs.weight', [s.headDim / 2], 'rope-llama3']);
  const experts = moe ? s.experts : 0;
  const offsets = o.routerSkew ? skewOffsets(o, s, moe) : undefined;
  // the routing coordinates: a constant and enough random ones that every expert's row can be
  // orthogonal to the others (independent random parts), within half the residual
  const routing = Math.min(Math.floor(s.embd / 2), Math.max(64, experts + 1));
  if (o.routerSkew) metadata.set('tandem.router_skew', gv.str(`zipf:${o.routerSkew.s}`));
  const tensors = raw.map(([n, dims, init]): PlannedTensor => {
    const isOutput = n === 'output.weight' || (o.tied && n === 'token_embd.weight');
    const t: PlannedTensor = {
      name: n,
      dims,
      init,
      type: tensorType(n, dims, o.type, s.layers, experts, isOutput),
    };
    if (!offsets) return t;
    t.routing = routing;
    if (n === 'token_embd.weight') t.init = 'embedding-skew';
    else if (n.endsWith('ffn_gate_inp.weight')) Object.assign(t, { init: 'router-skew', offsets });
    else if (dims.length >= 2 && /(attn_output|ffn_down(_exps|_shexp)?)\.weight$/.test(n)) t.isolate = 'out';
    else if (dims.length >= 2) t.isolate = 'in';
    else if (init === 'norm' && dims[0] === s.embd) t.isolate = 'unit';
    return t;
  });
  const params = tensors.reduce((acc, t) => acc + t.dims.reduce((a, b) => a * b, 1), 0);
  return { metadata, tensors, vocab, params };
}
