import { TandemError } from '../../errors/index.js';
import { TokenType, type TokenizerMetadata } from './metadata.js';

export type VocabKind = 'spm' | 'bpe';

/** Texts that mark the end of a turn in common chat formats (llama.cpp detects these by text too). */
const END_OF_TURN_TEXTS = new Set([
  '<|eot_id|>',
  '<|im_end|>',
  '<|end|>',
  '<end_of_turn>',
  '<|endoftext|>',
  '<|eom_id|>',
]);

function metaError(message: string, key: string): TandemError {
  return new TandemError('TOKENIZER_METADATA', message, {
    hint: 'the model file carries a malformed tokenizer; re-convert it with a current llama.cpp converter',
    details: { key },
  });
}

function checkId(id: number | undefined, n: number, key: string): number | undefined {
  if (id === undefined) return undefined;
  if (!Number.isInteger(id) || id < 0 || id >= n)
    throw metaError(`${key} = ${id} is outside the vocabulary of ${n} tokens`, key);
  return id;
}

/**
 * The token table shared by both tokenizer kinds: texts, scores, types, the text -> id map
 * and the special tokens matched as whole strings before BPE.
 */
export class Vocab {
  readonly kind: VocabKind;
  readonly tokens: readonly string[];
  readonly scores: Float32Array;
  readonly types: Uint8Array;
  /** Text -> id; the last of duplicate texts wins, as in llama.cpp. */
  readonly textToId = new Map<string, number>();
  /** Control, user-defined and unknown tokens, longest UTF-8 text first. */
  readonly specials: readonly number[];
  readonly bosId: number | undefined;
  readonly eosId: number | undefined;
  readonly unknownId: number | undefined;
  readonly addBos: boolean;
  readonly addEos: boolean;
  readonly addSpacePrefix: boolean;
  /** Tokens that end generation: eos and end-of-turn control tokens. */
  readonly endOfGeneration: ReadonlySet<number>;

  constructor(meta: TokenizerMetadata, kind: VocabKind, defaultAddBos: boolean) {
    const n = meta.tokens.length;
    if (n === 0) throw metaError('tokenizer.ggml.tokens is empty', 'tokenizer.ggml.tokens');
    this.kind = kind;
    this.tokens = meta.tokens;
    this.scores = new Float32Array(n);
    this.types = new Uint8Array(n).fill(TokenType.normal);
    if (meta.scores !== undefined) {
      if (meta.scores.length !== n)
        throw metaError(
          `tokenizer.ggml.scores has ${meta.scores.length} entries for ${n} tokens`,
          'tokenizer.ggml.scores',
        );
      this.scores.set(Array.from(meta.scores));
    }
    if (meta.tokenTypes !== undefined) {
      if (meta.tokenTypes.length !== n)
        throw metaError(
          `tokenizer.ggml.token_type has ${meta.tokenTypes.length} entries for ${n} tokens`,
          'tokenizer.ggml.token_type',
        );
      for (let i = 0; i < n; i++) {
        const t = meta.tokenTypes[i] as number;
        if (!Number.isInteger(t) || t < 0 || t > TokenType.byte)
          throw metaError(
            `tokenizer.ggml.token_type[${i}] = ${t} is not a token type (0..6)`,
            'tokenizer.ggml.token_type',
          );
        this.types[i] = t;
      }
    }
    for (let i = 0; i < n; i++) this.textToId.set(meta.tokens[i] as string, i);
    this.bosId = checkId(meta.bosTokenId, n, 'tokenizer.ggml.bos_token_id');
    this.eosId = checkId(meta.eosTokenId, n, 'tokenizer.ggml.eos_token_id');
    this.unknownId = checkId(meta.unknownTokenId, n, 'tokenizer.ggml.unknown_token_id');
    this.addBos = meta.addBosToken ?? defaultAddBos;
    this.addEos = meta.addEosToken ?? false;
    this.addSpacePrefix = kind === 'spm' ? (meta.addSpacePrefix ?? true) : false;
    this.specials = this.collectSpecials();
    const eog = new Set<number>();
    if (this.eosId !== undefined) eog.add(this.eosId);
    for (let i = 0; i < n; i++)
      if (END_OF_TURN_TEXTS.has(this.tokens[i] as string) && this.isControl(i)) eog.add(i);
    this.endOfGeneration = eog;
  }

  get size(): number {
    return this.tokens.length;
  }

  isControl(id: number): boolean {
    return this.types[id] === TokenType.control;
  }

  private collectSpecials(): number[] {
    const ids: number[] = [];
    const bytes: number[] = [];
    for (let i = 0; i < this.tokens.length; i++) {
      const t = this.types[i];
      if (t !== TokenType.control && t !== TokenType.userDefined && t !== TokenType.unknown) continue;
      const text = this.tokens[i] as string;
      if (text.length === 0) continue;
      ids.push(i);
      bytes[i] = Buffer.byteLength(text, 'utf8');
    }
    return ids.sort((a, b) => (bytes[b] as number) - (bytes[a] as number));
  }
}
