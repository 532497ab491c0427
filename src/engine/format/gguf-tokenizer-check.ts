import { formatError, REGENERATE_HINT } from './format-error.js';
import type { GgufMetadata } from './gguf-metadata.js';
import { GgufValueType, valueTypeNames, type GgufArray } from './gguf-types.js';

const INTEGER_TYPES: readonly number[] = [
  GgufValueType.UINT8,
  GgufValueType.INT8,
  GgufValueType.UINT16,
  GgufValueType.INT16,
  GgufValueType.UINT32,
  GgufValueType.INT32,
  GgufValueType.UINT64,
  GgufValueType.INT64,
];

/**
 * The tokenizer arrays must agree with each other before anything indexes them by token id:
 * tokens are strings, scores f32 and token types i32 (one per token), merges strings, and
 * every special token id names a token.
 */
export function checkTokenizer(metadata: GgufMetadata, file: string): void {
  const arrayOf = (key: string, itemType: GgufValueType): GgufArray | undefined => {
    const v = metadata.get(key);
    if (v === undefined) return undefined;
    const arr = v.type === GgufValueType.ARRAY ? (v.value as GgufArray) : undefined;
    if (arr === undefined || arr.itemType !== itemType) {
      const got = arr ? `an array of ${valueTypeNames[arr.itemType]}` : `a ${valueTypeNames[v.type]}`;
      throw formatError(
        'MODEL_FORMAT_BAD_METADATA',
        file,
        key,
        `is ${got}, expected an array of ${valueTypeNames[itemType]}`,
        REGENERATE_HINT,
      );
    }
    return arr;
  };
  const tokens = arrayOf('tokenizer.ggml.tokens', GgufValueType.STRING);
  arrayOf('tokenizer.ggml.merges', GgufValueType.STRING);
  const parallel: [string, GgufValueType][] = [
    ['tokenizer.ggml.scores', GgufValueType.FLOAT32],
    ['tokenizer.ggml.token_type', GgufValueType.INT32],
  ];
  for (const [key, type] of parallel) {
    const arr = arrayOf(key, type);
    if (arr === undefined) continue;
    if (tokens === undefined)
      throw formatError(
        'MODEL_FORMAT_BAD_METADATA',
        file,
        key,
        'is present without tokenizer.ggml.tokens',
        REGENERATE_HINT,
      );
    if (arr.items.length !== tokens.items.length) {
      throw formatError(
        'MODEL_FORMAT_BAD_METADATA',
        file,
        key,
        `has ${arr.items.length} entries for ${tokens.items.length} tokens`,
        REGENERATE_HINT,
      );
    }
  }
  for (const key of metadata.keys()) {
    if (!/^tokenizer\.ggml\.[a-z_]+_token_id$/.test(key)) continue;
    const v = metadata.get(key)!;
    if (!INTEGER_TYPES.includes(v.type)) {
      throw formatError(
        'MODEL_FORMAT_BAD_METADATA',
        file,
        key,
        `is a ${valueTypeNames[v.type]}, expected an integer token id`,
        REGENERATE_HINT,
      );
    }
    const id = Number(v.value);
    if (tokens !== undefined && (id < 0 || id >= tokens.items.length)) {
      throw formatError(
        'MODEL_FORMAT_BAD_METADATA',
        file,
        key,
        `token id ${id} is outside the vocabulary of ${tokens.items.length} tokens`,
        REGENERATE_HINT,
      );
    }
  }
}
