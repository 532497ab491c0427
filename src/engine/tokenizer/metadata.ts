import { TandemError } from '../../errors/index.js';
import type { GgufArray, GgufValue } from '../format/gguf-types.js';

/**
 * A tokenizer's GGUF metadata as plain data (`tokenizer.ggml.*`), so tokenizers can be built
 * without a GGUF reader. Field names follow the GGUF keys.
 */
export interface TokenizerMetadata {
  /** `tokenizer.ggml.model`: 'llama' (SentencePiece) or 'gpt2' (byte-level BPE). */
  model: string;
  /** `tokenizer.ggml.pre`: the BPE pre-tokenizer ('llama-bpe', 'qwen2', 'gpt2', 'default'...). */
  pre?: string;
  tokens: readonly string[];
  /** One score per token; SentencePiece merges the highest-scoring pair first. */
  scores?: ArrayLike<number>;
  /** One `TokenType` per token; missing means all normal. */
  tokenTypes?: ArrayLike<number>;
  /** BPE merges, "left right", highest priority first. */
  merges?: readonly string[];
  bosTokenId?: number;
  eosTokenId?: number;
  unknownTokenId?: number;
  addBosToken?: boolean;
  addEosToken?: boolean;
  /** SentencePiece only: prefix the first piece of text with a space (default true). */
  addSpacePrefix?: boolean;
  /** `tokenizer.chat_template`. */
  chatTemplate?: string;
}

/** `tokenizer.ggml.token_type` values. */
export const TokenType = {
  undefined: 0,
  normal: 1,
  unknown: 2,
  control: 3,
  userDefined: 4,
  unused: 5,
  byte: 6,
} as const;
export type TokenType = (typeof TokenType)[keyof typeof TokenType];

function bad(key: string, what: string): TandemError {
  return new TandemError('TOKENIZER_METADATA', `GGUF key ${key} ${what}`, {
    hint: 'the model file carries a malformed tokenizer; re-convert it with a current llama.cpp converter',
    details: { key },
  });
}

function optional<T>(
  kv: ReadonlyMap<string, unknown>,
  key: string,
  check: (v: unknown) => v is T,
  want: string,
): T | undefined {
  const v = kv.get(key);
  if (v === undefined) return undefined;
  if (!check(v)) throw bad(key, `must be ${want}, got ${typeof v}`);
  return v;
}

const isString = (v: unknown): v is string => typeof v === 'string';
const isBool = (v: unknown): v is boolean => typeof v === 'boolean';
const isId = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;
const isStringArray = (v: unknown): v is string[] => Array.isArray(v) && v.every(isString);
const isNumberArray = (v: unknown): v is ArrayLike<number> =>
  (Array.isArray(v) && v.every((x) => typeof x === 'number')) || ArrayBuffer.isView(v);

/** A GGUF value as plain data: arrays as their items, 64-bit integers as numbers when exact. */
function plain(v: GgufValue): unknown {
  if (typeof v.value === 'bigint')
    return v.value <= BigInt(Number.MAX_SAFE_INTEGER) && v.value >= 0n ? Number(v.value) : v.value;
  if (typeof v.value === 'object') return (v.value as GgufArray).items;
  return v.value;
}

/**
 * Reads the `tokenizer.*` keys of a GGUF file's metadata (as the GGUF reader returns them)
 * into TokenizerMetadata, checking each key's type.
 */
export function tokenizerMetadataFromGguf(entries: ReadonlyMap<string, GgufValue>): TokenizerMetadata {
  const kv = new Map<string, unknown>();
  for (const [key, value] of entries) if (key.startsWith('tokenizer.')) kv.set(key, plain(value));
  return fromPlain(kv);
}

function fromPlain(kv: ReadonlyMap<string, unknown>): TokenizerMetadata {
  const model = optional(kv, 'tokenizer.ggml.model', isString, 'a string');
  if (model === undefined) throw bad('tokenizer.ggml.model', 'is missing');
  const tokens = optional(kv, 'tokenizer.ggml.tokens', isStringArray, 'an array of strings');
  if (tokens === undefined) throw bad('tokenizer.ggml.tokens', 'is missing');
  const meta: TokenizerMetadata = { model, tokens };
  const pre = optional(kv, 'tokenizer.ggml.pre', isString, 'a string');
  if (pre !== undefined) meta.pre = pre;
  const scores = optional(kv, 'tokenizer.ggml.scores', isNumberArray, 'an array of numbers');
  if (scores !== undefined) meta.scores = scores;
  const types = optional(kv, 'tokenizer.ggml.token_type', isNumberArray, 'an array of integers');
  if (types !== undefined) meta.tokenTypes = types;
  const merges = optional(kv, 'tokenizer.ggml.merges', isStringArray, 'an array of strings');
  if (merges !== undefined) meta.merges = merges;
  const ids: [keyof TokenizerMetadata, string][] = [
    ['bosTokenId', 'tokenizer.ggml.bos_token_id'],
    ['eosTokenId', 'tokenizer.ggml.eos_token_id'],
    ['unknownTokenId', 'tokenizer.ggml.unknown_token_id'],
  ];
  for (const [field, key] of ids) {
    const v = optional(kv, key, isId, 'a non-negative integer');
    if (v !== undefined) (meta as unknown as Record<string, unknown>)[field] = v;
  }
  const flags: [keyof TokenizerMetadata, string][] = [
    ['addBosToken', 'tokenizer.ggml.add_bos_token'],
    ['addEosToken', 'tokenizer.ggml.add_eos_token'],
    ['addSpacePrefix', 'tokenizer.ggml.add_space_prefix'],
  ];
  for (const [field, key] of flags) {
    const v = optional(kv, key, isBool, 'a boolean');
    if (v !== undefined) (meta as unknown as Record<string, unknown>)[field] = v;
  }
  const template = optional(kv, 'tokenizer.chat_template', isString, 'a string');
  if (template !== undefined) meta.chatTemplate = template;
  return meta;
}
