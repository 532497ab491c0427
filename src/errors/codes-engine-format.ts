import type { ErrorCategory } from './category.js';

/** Error codes raised by the model file readers and writers (src/engine/format), each with its category. */
export const engineFormatCodes = {
  MODEL_FORMAT_IO: 'system',
  MODEL_FORMAT_BAD_MAGIC: 'invalid_argument',
  MODEL_FORMAT_BAD_VERSION: 'invalid_argument',
  MODEL_FORMAT_TRUNCATED: 'invalid_argument',
  MODEL_FORMAT_BAD_COUNT: 'invalid_argument',
  MODEL_FORMAT_BAD_STRING: 'invalid_argument',
  MODEL_FORMAT_BAD_VALUE_TYPE: 'invalid_argument',
  MODEL_FORMAT_BAD_TENSOR_TYPE: 'invalid_argument',
  MODEL_FORMAT_BAD_DIMS: 'invalid_argument',
  MODEL_FORMAT_OVERFLOW: 'invalid_argument',
  MODEL_FORMAT_BAD_ALIGNMENT: 'invalid_argument',
  MODEL_FORMAT_BAD_OFFSET: 'invalid_argument',
  MODEL_FORMAT_DUPLICATE: 'invalid_argument',
  MODEL_FORMAT_BAD_METADATA: 'invalid_argument',
  MODEL_FORMAT_BAD_HEADER: 'invalid_argument',
  MODEL_FORMAT_BAD_CONFIG: 'invalid_argument',
  MODEL_FORMAT_NOT_FOUND: 'invalid_argument',
  MODEL_FORMAT_BAD_RANGE: 'invalid_argument',
  MODEL_FORMAT_UNSUPPORTED: 'invalid_argument',
  /** A model folder lacks a file (config.json, tokenizer.json, a shard) or a tensor its architecture needs. */
  MODEL_FOLDER_INCOMPLETE: 'invalid_argument',
  /** A model folder holds an architecture, dtype, tokenizer or quantization tandem does not read. */
  MODEL_FOLDER_UNSUPPORTED: 'invalid_argument',
} as const satisfies Record<string, ErrorCategory>;
