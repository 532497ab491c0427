import { TandemError } from '../../errors/index.js';
import { TokenType, type TokenizerMetadata } from './metadata.js';

export type VocabKind = 'spm' | 'bpe';

/**
 * Texts that end a turn in common chat formats. Like llama.cpp, tokens with these texts end
 * generation and are treated as control tokens whatever type the file gives them.
 */
const END_OF_GENERATION_TEXTS = new Set([
  '<|eot_id|>',
  '<|eom_id|>',
  '<|im_end|>',
  '<|end|>',
  '<end_of_turn>',
  '<|endoftext|>',
  '<|end_of_text|>',
  '<EOT>',
  '_<EOT>',
  '<｜end▁of▁sentence｜>',
  '<end_of_utterance>',
  '<|return|>',
  '<|call|>',
  '</s>',
]);

/** gpt-oss markers: llama.cpp makes them user-defined, so they always match and always render. */
const USER_DEFINED_TEXTS = new Set(['<|channel|>', '<|message|>', '<|start|>', '<|constrain|>']);

/**
 * Fill-in-the-middle markers, one group per role; pad, repo and file-separator markers also
 * end generation. llama.cpp takes the first of a group it meets in hash order, so only a
 * group with exactly one token present is predictable; that is the case we follow (real
 * vocabularies have one spelling each).
 */
const FIM_GROUPS: readonly { texts: readonly string[]; endsGeneration: boolean }[] = [
  {
    texts: ['<|fim_prefix|>', '<fim-prefix>', '<｜fim▁begin｜>', '<PRE>', '▁<PRE>', '<|code_prefix|>'],
    endsGeneration: false,
  },
  {
    texts: ['<|fim_suffix|>', '<fim-suffix>', '<｜fim▁hole｜>', '<SUF>', '▁<SUF>', '<|code_suffix|>'],
    endsGeneration: false,
  },
  {
    texts: ['<|fim_middle|>', '<fim-middle>', '<｜fim▁end｜>', '<MID>', '▁<MID>', '<|code_middle|>'],
    endsGeneration: false,
  },
  { texts: ['<|fim_pad|>', '<fim-pad>', '<PAD>'], endsGeneration: true },
  { texts: ['<|fim_repo|>', '<|repo_name|>', '<fim-repo>', '<REPO>'], endsGeneration: true },
  { texts: ['<|file_sep|>'], endsGeneration: true },
];

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
    const fimEnds = this.markControlLooking();
    this.bosId = checkId(meta.bosTokenId, n, 'tokenizer.ggml.bos_token_id');
    this.eosId = checkId(meta.eosTokenId, n, 'tokenizer.ggml.eos_token_id');
    this.unknownId = checkId(meta.unknownTokenId, n, 'tokenizer.ggml.unknown_token_id');
    this.addBos = meta.addBosToken ?? defaultAddBos;
    this.addEos = meta.addEosToken ?? false;
    this.addSpacePrefix = kind === 'spm' ? (meta.addSpacePrefix ?? true) : false;
    this.specials = this.collectSpecials();
    const eog = new Set<number>(fimEnds);
    if (this.eosId !== undefined) eog.add(this.eosId);
    for (const text of END_OF_GENERATION_TEXTS) {
      const id = this.textToId.get(text);
      if (id !== undefined) eog.add(id);
    }
    this.endOfGeneration = eog;
  }

  get size(): number {
    return this.tokens.length;
  }

  isControl(id: number): boolean {
    return this.types[id] === TokenType.control;
  }

  /** Retypes tokens llama.cpp recognises by text; returns the FIM markers that end generation. */
  private markControlLooking(): number[] {
    const mark = (text: string, type: TokenType = TokenType.control): void => {
      const id = this.textToId.get(text);
      if (id !== undefined) this.types[id] = type;
    };
    for (const text of END_OF_GENERATION_TEXTS) mark(text);
    for (const text of USER_DEFINED_TEXTS) mark(text, TokenType.userDefined);
    const ends: number[] = [];
    for (const group of FIM_GROUPS) {
      const present = group.texts.filter((t) => this.textToId.has(t));
      if (present.length !== 1) continue;
      mark(present[0] as string);
      if (group.endsGeneration) ends.push(this.textToId.get(present[0] as string) as number);
    }
    return ends;
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
