import { TandemError } from '../../errors/index.js';

/** Architectures the engine runs (GGUF `general.architecture`). */
export type ModelArch = 'llama' | 'qwen2' | 'qwen3' | 'qwen2moe' | 'qwen3moe';
export const modelArchs: readonly ModelArch[] = ['llama', 'qwen2', 'qwen3', 'qwen2moe', 'qwen3moe'];

/**
 * How RoPE pairs dimensions inside a head: `normal` rotates adjacent pairs (2i, 2i+1) (llama,
 * whose converter permutes q/k for it); `neox` rotates (i, i + dim/2) (the Qwen family).
 */
export type RopeStyle = 'normal' | 'neox';

/** Everything the forward pass needs to know about a model, read from GGUF metadata. */
export interface ModelConfig {
  arch: ModelArch;
  vocabSize: number;
  contextLength: number;
  /** Width of the residual stream. */
  embeddingLength: number;
  blockCount: number;
  /** Hidden width of the dense FFN (0 when every layer is MoE and none is given). */
  feedForwardLength: number;
  headCount: number;
  headCountKv: number;
  /** Per-head width of q and k (`attention.key_length`, default embeddingLength / headCount). */
  headDim: number;
  rmsEps: number;
  ropeStyle: RopeStyle;
  ropeFreqBase: number;
  /** Multiplies positions: 1 / `rope.scaling.factor` for linear scaling, else 1. */
  ropeFreqScale: number;
  /** A `rope_freqs.weight` tensor divides each frequency (Llama 3 long-context scaling). */
  hasRopeFreqFactors: boolean;
  /** q/k/v projections carry biases (qwen2, qwen2moe). */
  hasQkvBias: boolean;
  /** RMSNorm over each q and k head before RoPE (qwen3, qwen3moe). */
  hasQkNorm: boolean;
  /** No `output.weight`: the output head reuses `token_embd.weight`. */
  tiedEmbeddings: boolean;
  /** 0 for dense models. */
  expertCount: number;
  expertUsedCount: number;
  /** Hidden width of one routed expert. */
  expertFeedForwardLength: number;
  /** Renormalise the top-k routing weights to sum to 1 (Mixtral, qwen3moe; not qwen2moe). */
  expertWeightsNorm: boolean;
  /** Hidden width of the shared expert (qwen2moe), 0 when there is none. */
  sharedExpertFeedForwardLength: number;
}

/** Reads one metadata value by key; undefined when absent. */
export type MetadataLookup = (key: string) => unknown;

/** The tensors a file holds: name to dimensions (GGUF order, contiguous first). */
export type TensorDims = ReadonlyMap<string, readonly number[]>;

function configError(message: string, key: string): TandemError {
  return new TandemError('MODEL_CONFIG', message, {
    hint: 'the model file lacks or misstates a hyperparameter; re-export it or regenerate it with `tandem make-model`',
    details: { key },
  });
}

function toNumber(value: unknown): number | undefined {
  if (typeof value === 'number') return value;
  if (typeof value === 'bigint') return Number(value);
  return undefined;
}

function readInt(meta: MetadataLookup, key: string, fallback?: number): number {
  const raw = meta(key);
  if (raw === undefined) {
    if (fallback !== undefined) return fallback;
    throw configError(`model metadata has no '${key}'`, key);
  }
  const value = toNumber(raw);
  if (value === undefined || !Number.isSafeInteger(value) || value < 0) {
    throw configError(`model metadata '${key}' must be a non-negative integer, got ${String(raw)}`, key);
  }
  return value;
}

function readFloat(meta: MetadataLookup, key: string, fallback?: number): number {
  const raw = meta(key);
  if (raw === undefined) {
    if (fallback !== undefined) return fallback;
    throw configError(`model metadata has no '${key}'`, key);
  }
  const value = toNumber(raw);
  if (value === undefined || !Number.isFinite(value)) {
    throw configError(`model metadata '${key}' must be a number, got ${String(raw)}`, key);
  }
  return value;
}

function positive(value: number, key: string): number {
  if (value <= 0) throw configError(`model metadata '${key}' must be positive, got ${value}`, key);
  return value;
}

function readArch(meta: MetadataLookup): ModelArch {
  const arch = meta('general.architecture');
  if (typeof arch !== 'string')
    throw configError("model metadata has no 'general.architecture'", 'general.architecture');
  if (!(modelArchs as readonly string[]).includes(arch)) {
    throw new TandemError('MODEL_UNSUPPORTED_ARCH', `architecture '${arch}' is not supported`, {
      hint: `tandem runs ${modelArchs.join(', ')} models`,
      details: { arch },
    });
  }
  return arch as ModelArch;
}

function readVocabSize(meta: MetadataLookup, arch: ModelArch, tensors: TensorDims): number {
  const embd = tensors.get('token_embd.weight');
  if (embd?.[1] !== undefined) return embd[1];
  const tokens = meta('tokenizer.ggml.tokens');
  if (Array.isArray(tokens)) return tokens.length;
  return positive(readInt(meta, `${arch}.vocab_size`), `${arch}.vocab_size`);
}

/** Reads the model configuration from GGUF metadata and the tensor list, validating it. */
export function configFromMetadata(meta: MetadataLookup, tensors: TensorDims): ModelConfig {
  const arch = readArch(meta);
  const k = (suffix: string): string => `${arch}.${suffix}`;
  const embeddingLength = positive(readInt(meta, k('embedding_length')), k('embedding_length'));
  const headCount = positive(readInt(meta, k('attention.head_count')), k('attention.head_count'));
  const headCountKv = positive(
    readInt(meta, k('attention.head_count_kv'), headCount),
    k('attention.head_count_kv'),
  );
  if (headCount % headCountKv !== 0) {
    throw configError(
      `attention.head_count ${headCount} is not a multiple of head_count_kv ${headCountKv}`,
      k('attention.head_count_kv'),
    );
  }
  const headDim = positive(
    readInt(meta, k('attention.key_length'), Math.floor(embeddingLength / headCount)),
    k('attention.key_length'),
  );
  const valueDim = readInt(meta, k('attention.value_length'), headDim);
  if (valueDim !== headDim) {
    throw configError(
      `attention.value_length ${valueDim} differs from key_length ${headDim}`,
      k('attention.value_length'),
    );
  }
  const ropeDims = readInt(meta, k('rope.dimension_count'), headDim);
  if (ropeDims !== headDim || headDim % 2 !== 0) {
    throw configError(
      `rope.dimension_count ${ropeDims} must equal the head width ${headDim} (even)`,
      k('rope.dimension_count'),
    );
  }
  const expertCount = readInt(meta, k('expert_count'), 0);
  const expertUsedCount = readInt(meta, k('expert_used_count'), 0);
  const moe = arch === 'qwen2moe' || arch === 'qwen3moe' || expertCount > 0;
  if (moe && (expertCount === 0 || expertUsedCount === 0 || expertUsedCount > expertCount)) {
    throw configError(
      `a mixture-of-experts model needs 0 < expert_used_count (${expertUsedCount}) <= expert_count (${expertCount})`,
      k('expert_used_count'),
    );
  }
  const feedForwardLength = readInt(meta, k('feed_forward_length'), moe ? 0 : undefined);
  if (!moe) positive(feedForwardLength, k('feed_forward_length'));
  // llama.cpp sizes Mixtral-style experts (arch llama) by feed_forward_length and the Qwen
  // MoEs by expert_feed_forward_length (default feed_forward_length / expert_used_count).
  let expertFeedForwardLength = 0;
  if (moe && arch === 'llama')
    expertFeedForwardLength = positive(feedForwardLength, k('feed_forward_length'));
  else if (moe) {
    expertFeedForwardLength = positive(
      readInt(meta, k('expert_feed_forward_length'), Math.floor(feedForwardLength / expertUsedCount)),
      k('expert_feed_forward_length'),
    );
  }
  const sharedExpertFeedForwardLength =
    arch === 'qwen2moe'
      ? positive(
          readInt(meta, k('expert_shared_feed_forward_length'), feedForwardLength),
          k('expert_shared_feed_forward_length'),
        )
      : 0;
  const scalingType = meta(k('rope.scaling.type'));
  const scalingFactor = readFloat(meta, k('rope.scaling.factor'), 0);
  const ropeFreqScale = scalingType === 'linear' && scalingFactor > 0 ? 1 / scalingFactor : 1;
  return {
    arch,
    vocabSize: readVocabSize(meta, arch, tensors),
    contextLength: positive(readInt(meta, k('context_length')), k('context_length')),
    embeddingLength,
    blockCount: positive(readInt(meta, k('block_count')), k('block_count')),
    feedForwardLength,
    headCount,
    headCountKv,
    headDim,
    rmsEps: positive(
      readFloat(meta, k('attention.layer_norm_rms_epsilon')),
      k('attention.layer_norm_rms_epsilon'),
    ),
    ropeStyle: arch === 'llama' ? 'normal' : 'neox',
    ropeFreqBase: positive(readFloat(meta, k('rope.freq_base'), 10000), k('rope.freq_base')),
    ropeFreqScale,
    hasRopeFreqFactors: tensors.has('rope_freqs.weight'),
    hasQkvBias: tensors.has('blk.0.attn_q.bias'),
    hasQkNorm: tensors.has('blk.0.attn_q_norm.weight'),
    tiedEmbeddings: !tensors.has('output.weight'),
    expertCount: moe ? expertCount : 0,
    expertUsedCount: moe ? expertUsedCount : 0,
    expertFeedForwardLength,
    expertWeightsNorm: arch !== 'qwen2moe',
    sharedExpertFeedForwardLength,
  };
}
