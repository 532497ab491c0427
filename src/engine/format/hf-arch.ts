import { formatError } from './format-error.js';
import type { GgufValue } from './gguf-types.js';
import { gv } from './gguf-writer.js';
import type { HfConfig } from './hf-config.js';
import { llama3RopeFactors } from './model-plan.js';

/** config.json `model_type` -> the GGUF architecture the engine runs it as. */
export const folderModelTypes: Readonly<Record<string, string>> = {
  llama: 'llama',
  mistral: 'llama',
  mixtral: 'llama',
  qwen2: 'qwen2',
  qwen3: 'qwen3',
  qwen2_moe: 'qwen2moe',
  qwen3_moe: 'qwen3moe',
};

/** The GGUF architecture of a folder's config.json, or a typed error naming what is supported. */
export function ggufArchOf(config: HfConfig, file: string): string {
  const arch = folderModelTypes[config.modelType];
  if (arch === undefined) {
    throw formatError(
      'MODEL_FOLDER_UNSUPPORTED',
      file,
      'model_type',
      `architecture '${config.modelType}'${config.architectures.length ? ` (${config.architectures.join(', ')})` : ''} is not supported; tandem runs model_type ${Object.keys(folderModelTypes).join(', ')}`,
      'pick a model of a supported architecture (Llama 2/3, Mistral, Mixtral, Qwen2/2.5/3, Qwen2-MoE, Qwen3-MoE)',
      { modelType: config.modelType },
    );
  }
  return arch;
}

const isMoe = (arch: string, config: HfConfig): boolean => config.numExperts > 0 || arch.endsWith('moe');

function intField(config: HfConfig, key: string): number | undefined {
  const v = config.raw[key];
  return typeof v === 'number' && Number.isSafeInteger(v) && v > 0 ? v : undefined;
}

/** RoPE scaling keys, and the rope_freqs.weight factors for Llama 3.1-style scaling. */
function ropeScaling(
  arch: string,
  config: HfConfig,
  file: string,
): { meta: [string, GgufValue][]; factors?: Float32Array } {
  const s = config.ropeScaling;
  if (s === null) return { meta: [] };
  const kind = s.rope_type ?? s.type;
  const num = (key: string, fallback?: number): number => {
    const v = s[key] ?? fallback;
    if (typeof v !== 'number' || !(v > 0))
      throw formatError(
        'MODEL_FORMAT_BAD_CONFIG',
        file,
        `rope_scaling.${key}`,
        'must be a positive number',
        'fix config.json',
      );
    return v;
  };
  if (kind === 'default') return { meta: [] };
  if (kind === 'linear')
    return {
      meta: [
        [`${arch}.rope.scaling.type`, gv.str('linear')],
        [`${arch}.rope.scaling.factor`, gv.f32(num('factor'))],
      ],
    };
  if (kind === 'llama3' && arch === 'llama') {
    const factors = llama3RopeFactors(config.headDim, {
      base: config.ropeTheta,
      factor: num('factor'),
      lowFreqFactor: num('low_freq_factor', 1),
      highFreqFactor: num('high_freq_factor', 4),
      originalContext: num('original_max_position_embeddings', 8192),
    });
    return { meta: [], factors };
  }
  throw formatError(
    'MODEL_FOLDER_UNSUPPORTED',
    file,
    'rope_scaling',
    `RoPE scaling ${JSON.stringify(kind)} is not supported for ${arch} (linear, and llama3 for Llama, are)`,
    'use a model without this RoPE scaling',
  );
}

/** The `<arch>.*` GGUF keys llama.cpp and the engine read, from config.json. */
export function archMetadata(
  arch: string,
  config: HfConfig,
  file: string,
): { meta: [string, GgufValue][]; ropeFactors?: Float32Array } {
  const c = config;
  const moe = isMoe(arch, c);
  const meta: [string, GgufValue][] = [
    [`${arch}.context_length`, gv.u32(c.maxPositionEmbeddings)],
    [`${arch}.embedding_length`, gv.u32(c.hiddenSize)],
    [`${arch}.block_count`, gv.u32(c.numHiddenLayers)],
    [`${arch}.feed_forward_length`, gv.u32(c.intermediateSize)],
    [`${arch}.attention.head_count`, gv.u32(c.numAttentionHeads)],
    [`${arch}.attention.head_count_kv`, gv.u32(c.numKeyValueHeads)],
    [`${arch}.attention.layer_norm_rms_epsilon`, gv.f32(c.rmsNormEps)],
    [`${arch}.rope.freq_base`, gv.f32(c.ropeTheta)],
    [`${arch}.rope.dimension_count`, gv.u32(c.headDim)],
    [`${arch}.vocab_size`, gv.u32(c.vocabSize)],
  ];
  if (arch.startsWith('qwen3') || c.headDim * c.numAttentionHeads !== c.hiddenSize)
    meta.push(
      [`${arch}.attention.key_length`, gv.u32(c.headDim)],
      [`${arch}.attention.value_length`, gv.u32(c.headDim)],
    );
  if (moe)
    meta.push(
      [`${arch}.expert_count`, gv.u32(c.numExperts)],
      [`${arch}.expert_used_count`, gv.u32(c.numExpertsPerTok)],
    );
  if (moe && arch !== 'llama' && c.moeIntermediateSize > 0)
    meta.push([`${arch}.expert_feed_forward_length`, gv.u32(c.moeIntermediateSize)]);
  const shared = intField(c, 'shared_expert_intermediate_size');
  if (arch === 'qwen2moe' && shared !== undefined)
    meta.push([`${arch}.expert_shared_feed_forward_length`, gv.u32(shared)]);
  const rope = ropeScaling(arch, c, file);
  meta.push(...rope.meta);
  return rope.factors ? { meta, ropeFactors: rope.factors } : { meta };
}

/**
 * How one GGUF tensor is made from the folder: the rows of `parts`, in order (one part, or one
 * per expert stacked into [cols, rows, experts]), or fixed `values`.
 */
export interface TensorRecipe {
  gguf: string;
  parts: string[];
  /**
   * Llama's q and k: Hugging Face stores each head's rotary pairs as halves (i, i + d/2); the
   * engine and llama.cpp rotate adjacent pairs (2i, 2i+1), so rows are permuted per head (the
   * permutation llama.cpp's converter applies). The number of heads.
   */
  permuteHeads?: number;
  /** Drop trailing dims of 1 (qwen2moe's shared_expert_gate [1, embd] is the vector [embd]). */
  squeeze?: boolean;
  values?: Float32Array;
}

/** The folder's names for one layer's routed experts: MLX's stacked switch_mlp, or one tensor per expert. */
function experts(
  p: string,
  b: string,
  block: string,
  names: [string, string, string],
  perExpert: [string, string, string],
  n: number,
  has: (name: string) => boolean,
): TensorRecipe[] {
  const gguf = ['ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps'];
  return gguf.map((g, k) => {
    const stacked = `${p}${block}.switch_mlp.${names[k]}.weight`;
    if (has(stacked)) return { gguf: `${b}${g}.weight`, parts: [stacked] };
    const parts = Array.from({ length: n }, (_, e) => `${p}${block}.experts.${e}.${perExpert[k]}.weight`);
    return { gguf: `${b}${g}.weight`, parts };
  });
}

function layerRecipes(arch: string, c: HfConfig, i: number, has: (name: string) => boolean): TensorRecipe[] {
  const p = `model.layers.${i}.`;
  const b = `blk.${i}.`;
  const one = (gguf: string, hf: string): TensorRecipe => ({ gguf: `${b}${gguf}`, parts: [`${p}${hf}`] });
  const llama = arch === 'llama';
  const out: TensorRecipe[] = [
    one('attn_norm.weight', 'input_layernorm.weight'),
    {
      ...one('attn_q.weight', 'self_attn.q_proj.weight'),
      ...(llama ? { permuteHeads: c.numAttentionHeads } : {}),
    },
    {
      ...one('attn_k.weight', 'self_attn.k_proj.weight'),
      ...(llama ? { permuteHeads: c.numKeyValueHeads } : {}),
    },
    one('attn_v.weight', 'self_attn.v_proj.weight'),
    one('attn_output.weight', 'self_attn.o_proj.weight'),
    one('ffn_norm.weight', 'post_attention_layernorm.weight'),
  ];
  if (arch.startsWith('qwen2'))
    for (const x of ['q', 'k', 'v']) out.push(one(`attn_${x}.bias`, `self_attn.${x}_proj.bias`));
  if (arch.startsWith('qwen3'))
    out.push(
      one('attn_q_norm.weight', 'self_attn.q_norm.weight'),
      one('attn_k_norm.weight', 'self_attn.k_norm.weight'),
    );
  if (!isMoe(arch, c)) {
    out.push(
      one('ffn_gate.weight', 'mlp.gate_proj.weight'),
      one('ffn_up.weight', 'mlp.up_proj.weight'),
      one('ffn_down.weight', 'mlp.down_proj.weight'),
    );
  } else if (llama) {
    out.push(one('ffn_gate_inp.weight', 'block_sparse_moe.gate.weight'));
    out.push(
      ...experts(
        p,
        b,
        'block_sparse_moe',
        ['gate_proj', 'up_proj', 'down_proj'],
        ['w1', 'w3', 'w2'],
        c.numExperts,
        has,
      ),
    );
  } else {
    out.push(one('ffn_gate_inp.weight', 'mlp.gate.weight'));
    const proj: [string, string, string] = ['gate_proj', 'up_proj', 'down_proj'];
    out.push(...experts(p, b, 'mlp', proj, proj, c.numExperts, has));
    if (arch === 'qwen2moe')
      out.push(
        { ...one('ffn_gate_inp_shexp.weight', 'mlp.shared_expert_gate.weight'), squeeze: true },
        one('ffn_gate_shexp.weight', 'mlp.shared_expert.gate_proj.weight'),
        one('ffn_up_shexp.weight', 'mlp.shared_expert.up_proj.weight'),
        one('ffn_down_shexp.weight', 'mlp.shared_expert.down_proj.weight'),
      );
  }
  return out;
}

/**
 * Every GGUF tensor of the model and how to make it, in llama.cpp's order. `output.weight`
 * is listed only when the folder has `lm_head.weight` (else the engine ties it to the
 * embeddings).
 */
export function tensorRecipes(
  arch: string,
  config: HfConfig,
  has: (name: string) => boolean,
  ropeFactors?: Float32Array,
): TensorRecipe[] {
  if (arch === 'llama') {
    const bias = 'model.layers.0.self_attn.q_proj.bias';
    if (has(bias)) {
      throw formatError(
        'MODEL_FOLDER_UNSUPPORTED',
        bias,
        'attention_bias',
        'Llama-family attention biases are not supported',
        'use a model without attention biases',
      );
    }
  }
  const out: TensorRecipe[] = [];
  if (ropeFactors) out.push({ gguf: 'rope_freqs.weight', parts: [], values: ropeFactors });
  out.push({ gguf: 'token_embd.weight', parts: ['model.embed_tokens.weight'] });
  for (let i = 0; i < config.numHiddenLayers; i++) out.push(...layerRecipes(arch, config, i, has));
  out.push({ gguf: 'output_norm.weight', parts: ['model.norm.weight'] });
  if (has('lm_head.weight') && !(config.tieWordEmbeddings && !has('model.embed_tokens.weight')))
    out.push({ gguf: 'output.weight', parts: ['lm_head.weight'] });
  return out;
}

/** GGUF row `r` of a llama q/k weight comes from this Hugging Face row (see TensorRecipe.permuteHeads). */
export function permutedRow(r: number, rows: number, heads: number): number {
  const d = rows / heads;
  const rem = r % d;
  return r - rem + (rem % 2) * (d / 2) + Math.floor(rem / 2);
}
