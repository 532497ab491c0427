import { readFileSync } from 'node:fs';
import { TandemError } from '../../errors/index.js';
import { formatError } from './format-error.js';

/** The fields of a Hugging Face config.json that tandem's model code reads (Llama, Mistral, Qwen2/3, Mixtral, Qwen-MoE). */
export interface HfConfig {
  modelType: string;
  architectures: string[];
  hiddenSize: number;
  intermediateSize: number;
  numHiddenLayers: number;
  numAttentionHeads: number;
  numKeyValueHeads: number;
  headDim: number;
  vocabSize: number;
  maxPositionEmbeddings: number;
  rmsNormEps: number;
  ropeTheta: number;
  ropeScaling: Record<string, unknown> | null;
  tieWordEmbeddings: boolean;
  /** Mixture of experts (0 when dense). */
  numExperts: number;
  numExpertsPerTok: number;
  moeIntermediateSize: number;
  torchDtype: string | undefined;
  /** The parsed JSON, for fields not listed here. */
  raw: Record<string, unknown>;
}

const HINT = 'fix config.json or take it from the same model repository as the weights';

/** Parses config.json text; every missing or ill-typed field is a typed error naming it. */
export function parseHfConfig(text: string, file = 'config.json'): HfConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw formatError(
      'MODEL_FORMAT_BAD_CONFIG',
      file,
      'json',
      `is not valid JSON (${(error as Error).message})`,
      HINT,
    );
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw formatError('MODEL_FORMAT_BAD_CONFIG', file, 'json', 'is not a JSON object', HINT);
  const obj = raw as Record<string, unknown>;
  const bad = (field: string, want: string): TandemError =>
    formatError(
      'MODEL_FORMAT_BAD_CONFIG',
      file,
      field,
      obj[field] === undefined
        ? `is missing (expected ${want})`
        : `is ${JSON.stringify(obj[field])}, expected ${want}`,
      HINT,
    );
  const int = (field: string, fallback?: number): number => {
    const v = obj[field] ?? fallback;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) throw bad(field, 'a positive integer');
    return v;
  };
  const num = (field: string, fallback?: number): number => {
    const v = obj[field] ?? fallback;
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw bad(field, 'a positive number');
    return v;
  };
  const modelType = obj.model_type;
  if (typeof modelType !== 'string') throw bad('model_type', 'a string');
  const architectures = obj.architectures ?? [];
  if (!Array.isArray(architectures) || !architectures.every((a) => typeof a === 'string'))
    throw bad('architectures', 'a list of strings');
  const tie = obj.tie_word_embeddings ?? false;
  if (typeof tie !== 'boolean') throw bad('tie_word_embeddings', 'true or false');
  const scaling = obj.rope_scaling ?? null;
  if (scaling !== null && (typeof scaling !== 'object' || Array.isArray(scaling)))
    throw bad('rope_scaling', 'an object or null');
  const hidden = int('hidden_size');
  const heads = int('num_attention_heads');
  const kvHeads = int('num_key_value_heads', heads);
  if (heads % kvHeads !== 0) throw bad('num_key_value_heads', `a divisor of num_attention_heads (${heads})`);
  const experts = obj.num_local_experts ?? obj.num_experts ?? 0;
  if (typeof experts !== 'number' || !Number.isSafeInteger(experts) || experts < 0)
    throw bad(
      obj.num_local_experts !== undefined ? 'num_local_experts' : 'num_experts',
      'a non-negative integer',
    );
  const perTok = experts > 0 ? int('num_experts_per_tok') : 0;
  if (perTok > experts) throw bad('num_experts_per_tok', `at most the number of experts (${experts})`);
  const dtype = obj.torch_dtype;
  return {
    modelType,
    architectures: architectures as string[],
    hiddenSize: hidden,
    intermediateSize: int('intermediate_size'),
    numHiddenLayers: int('num_hidden_layers'),
    numAttentionHeads: heads,
    numKeyValueHeads: kvHeads,
    headDim: obj.head_dim === undefined || obj.head_dim === null ? hidden / heads : int('head_dim'),
    vocabSize: int('vocab_size'),
    maxPositionEmbeddings: int('max_position_embeddings', 2048),
    rmsNormEps: num('rms_norm_eps', 1e-6),
    ropeTheta: num('rope_theta', 10000),
    ropeScaling: scaling as Record<string, unknown> | null,
    tieWordEmbeddings: tie,
    numExperts: experts,
    numExpertsPerTok: perTok,
    moeIntermediateSize:
      experts > 0 && obj.moe_intermediate_size !== undefined ? int('moe_intermediate_size') : 0,
    torchDtype: typeof dtype === 'string' ? dtype : undefined,
    raw: obj,
  };
}

export function loadHfConfig(path: string): HfConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new TandemError('MODEL_FORMAT_IO', `cannot read ${path}: ${(error as Error).message}`, {
      hint: 'pass the folder or path holding config.json',
      details: { file: path },
      cause: error,
    });
  }
  return parseHfConfig(text, path);
}
