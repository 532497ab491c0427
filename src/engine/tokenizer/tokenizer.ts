import { TandemError } from '../../errors/index.js';
import { BpeEncoder } from './bpe.js';
import { checkTokenId, pieceBytes, StreamDecoder } from './decode.js';
import type { TokenizerMetadata } from './metadata.js';
import { preTokenizerFor } from './pre-tokenizer.js';
import { partitionSpecial } from './special.js';
import { encodeSpm, SPACE_MARKER } from './spm.js';
import { Vocab } from './vocab.js';

const LONE_SURROGATE = /\p{Cs}/gu;

export interface EncodeOptions {
  /** Prepend BOS (default: the model's `add_bos_token`). */
  addBos?: boolean;
  /** Append EOS (default: the model's `add_eos_token`). */
  addEos?: boolean;
  /** Match control tokens written in the text, e.g. `<|im_start|>` (default false). */
  parseSpecial?: boolean;
}

export interface DecodeOptions {
  /** Render control tokens as their text (default false: they decode to nothing). */
  special?: boolean;
  /**
   * Drop one leading space from the first token (default: true for SentencePiece, which
   * adds one when encoding), as llama.cpp's detokenize does.
   */
  stripLeadingSpace?: boolean;
  /**
   * Undo the spaces a word-level tokenizer put before punctuation and contractions
   * (" ." -> ".", " ' " -> "'", " 's" -> "'s"...) as llama.cpp does (default: true for BPE
   * vocabularies except Qwen2's).
   */
  cleanSpaces?: boolean;
}

/** llama.cpp's clean-up passes, in order: space before ?!., ; a quote between spaces; contractions. */
function cleanSpaces(text: string): string {
  return text
    .replace(/ ([?!.,])/g, '$1')
    .replace(/ ' /g, "'")
    .replace(/ '(?=[sm]|re|ve)/g, "'");
}

/** llama.cpp's SentencePiece defaults when the ids are not in the file: unk 0, BOS 1, EOS 2. */
function withSpmDefaults(meta: TokenizerMetadata): TokenizerMetadata {
  const n = meta.tokens.length;
  const out = { ...meta };
  if (out.unknownTokenId === undefined && n > 0) out.unknownTokenId = 0;
  if (out.bosTokenId === undefined && n > 1) out.bosTokenId = 1;
  if (out.eosTokenId === undefined && n > 2) out.eosTokenId = 2;
  return out;
}

/** A tokenizer built from GGUF tokenizer metadata: SentencePiece ('llama') or byte-level BPE ('gpt2'). */
export class Tokenizer {
  readonly vocab: Vocab;
  private readonly bpe: BpeEncoder | undefined;
  private readonly cleanSpacesByDefault: boolean;

  constructor(meta: TokenizerMetadata) {
    if (meta.model === 'llama') {
      this.vocab = new Vocab(withSpmDefaults(meta), 'spm', true);
      this.bpe = undefined;
      this.cleanSpacesByDefault = false;
    } else if (meta.model === 'gpt2') {
      const pre = preTokenizerFor(meta.pre);
      // llama.cpp adds BOS by default only for the Llama 3 pre-tokenizer.
      this.vocab = new Vocab(meta, 'bpe', pre.name === 'llama3');
      if (meta.merges === undefined)
        throw new TandemError(
          'TOKENIZER_METADATA',
          'tokenizer.ggml.merges is missing for a gpt2 (BPE) tokenizer',
          {
            hint: 'the model file carries a malformed tokenizer; re-convert it with a current llama.cpp converter',
            details: { key: 'tokenizer.ggml.merges' },
          },
        );
      this.bpe = new BpeEncoder(this.vocab, meta.merges, pre, pre.name === 'llama3');
      this.cleanSpacesByDefault = pre.name !== 'qwen2';
    } else {
      throw new TandemError('TOKENIZER_UNSUPPORTED', `tokenizer model '${meta.model}' is not supported`, {
        hint: "tandem reads tokenizer.ggml.model 'llama' (SentencePiece) and 'gpt2' (BPE)",
        details: { model: meta.model },
      });
    }
  }

  get vocabSize(): number {
    return this.vocab.size;
  }
  get bosId(): number | undefined {
    return this.vocab.bosId;
  }
  get eosId(): number | undefined {
    return this.vocab.eosId;
  }

  /** True for tokens that end generation (EOS and end-of-turn control tokens). */
  isEndOfGeneration(id: number): boolean {
    return this.vocab.endOfGeneration.has(id);
  }

  tokenText(id: number): string {
    checkTokenId(this.vocab, id);
    return this.vocab.tokens[id] as string;
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    const out: number[] = [];
    if (options.addBos ?? this.vocab.addBos) out.push(this.requireSpecial(this.vocab.bosId, 'BOS'));
    // Lone surrogates become U+FFFD, as they would through UTF-8.
    const fragments = partitionSpecial(
      this.vocab,
      text.replace(LONE_SURROGATE, '\uFFFD'),
      options.parseSpecial ?? false,
    );
    // SentencePiece prefixes a space to text at the start and after every special token.
    let afterSpecial = true;
    for (const f of fragments) {
      if ('id' in f) {
        out.push(f.id);
        afterSpecial = true;
        continue;
      }
      if (this.bpe !== undefined) {
        this.bpe.encode(f.text, out);
      } else {
        const prefixed = this.vocab.addSpacePrefix && afterSpecial ? ' ' + f.text : f.text;
        encodeSpm(this.vocab, prefixed.replaceAll(' ', SPACE_MARKER), out);
      }
      afterSpecial = false;
    }
    if (options.addEos ?? this.vocab.addEos) out.push(this.requireSpecial(this.vocab.eosId, 'EOS'));
    return out;
  }

  /** The raw bytes of one token (control tokens empty unless `special`). */
  tokenBytes(id: number, special = false): Uint8Array {
    checkTokenId(this.vocab, id);
    return pieceBytes(this.vocab, id, special).slice();
  }

  /** Whole-sequence decode; invalid or incomplete UTF-8 becomes U+FFFD. */
  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    const special = options.special ?? false;
    let strip = options.stripLeadingSpace ?? this.vocab.addSpacePrefix;
    const parts: Uint8Array[] = [];
    for (const id of ids) {
      checkTokenId(this.vocab, id);
      let bytes = pieceBytes(this.vocab, id, special);
      if (strip && bytes[0] === 0x20) bytes = bytes.subarray(1);
      strip = false;
      parts.push(bytes);
    }
    const text = Buffer.concat(parts).toString('utf8');
    return (options.cleanSpaces ?? this.cleanSpacesByDefault) ? cleanSpaces(text) : text;
  }

  /** An incremental decoder for generated tokens (no leading-space stripping). */
  streamDecoder(options: { special?: boolean } = {}): StreamDecoder {
    return new StreamDecoder(this.vocab, options.special ?? false);
  }

  private requireSpecial(id: number | undefined, name: string): number {
    if (id === undefined)
      throw new TandemError('TOKENIZER_NO_SPECIAL_TOKEN', `the tokenizer has no ${name} token to add`, {
        hint: `encode with add${name === 'BOS' ? 'Bos' : 'Eos'}: false, or use a model whose GGUF sets tokenizer.ggml.${name.toLowerCase()}_token_id`,
        details: { token: name },
      });
    return id;
  }
}
