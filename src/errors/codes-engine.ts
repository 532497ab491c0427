import type { ErrorCategory } from './category.js';

/** Error codes raised by the engine layer, each with its category. Keep sorted by prefix. */
export const engineCodes = {
  GENERATE_PROMPT: 'invalid_argument',
  KV_CONTEXT_FULL: 'invalid_usage',
  MODEL_CONFIG: 'invalid_argument',
  MODEL_SHARD: 'invalid_argument',
  MODEL_TENSOR: 'invalid_argument',
  MODEL_UNSUPPORTED_ARCH: 'invalid_argument',
} as const satisfies Record<string, ErrorCategory>;
