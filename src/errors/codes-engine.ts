import type { ErrorCategory } from './category.js';

/** Error codes raised by the engine layer, each with its category. Keep sorted by prefix. */
export const engineCodes = {
  CHAT_MESSAGES: 'invalid_argument',
  CHAT_TEMPLATE_FAILED: 'invalid_argument',
  CHAT_TEMPLATE_MISSING: 'invalid_usage',
  GENERATE_PROMPT: 'invalid_argument',
  JSON_CONSTRAINT: 'internal',
  JSON_SCHEMA_UNSUPPORTED: 'invalid_argument',
  KV_CONTEXT_FULL: 'invalid_usage',
  MODEL_CONFIG: 'invalid_argument',
  MODEL_SHARD: 'invalid_argument',
  MODEL_TENSOR: 'invalid_argument',
  MODEL_UNSUPPORTED_ARCH: 'invalid_argument',
  SAMPLER_LOGITS: 'invalid_argument',
  SAMPLER_PARAMS: 'invalid_argument',
  TOKENIZER_BYTE_FALLBACK: 'invalid_argument',
  TOKENIZER_METADATA: 'invalid_argument',
  TOKENIZER_NO_SPECIAL_TOKEN: 'invalid_usage',
  TOKENIZER_TOKEN_ID: 'invalid_argument',
  TOKENIZER_UNSUPPORTED: 'invalid_argument',
  TRAIN_CHECKPOINT: 'invalid_argument',
  TRAIN_DATA: 'invalid_argument',
  TRAIN_OPTIONS: 'invalid_usage',
} as const satisfies Record<string, ErrorCategory>;
