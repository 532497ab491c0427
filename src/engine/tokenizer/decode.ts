import { TandemError } from '../../errors/index.js';
import { CHAR_TO_BYTE } from './bpe.js';
import { TokenType } from './metadata.js';
import { SPACE_MARKER } from './spm.js';
import type { Vocab } from './vocab.js';

const EMPTY = new Uint8Array(0);
const BYTE_TOKEN = /^<0x([0-9A-Fa-f]{2})>$/;

/**
 * The bytes a token stands for, as llama.cpp's token_to_piece: control and unknown tokens are
 * empty unless `special`, user-defined tokens are their text, SentencePiece pieces turn U+2581
 * into spaces, byte tokens are their byte, byte-level BPE pieces map back to raw bytes, and
 * unused tokens are empty.
 */
export function pieceBytes(vocab: Vocab, id: number, special: boolean): Uint8Array {
  let cache = pieceCache.get(vocab);
  if (cache === undefined) {
    cache = [new Array<Uint8Array>(vocab.size), new Array<Uint8Array>(vocab.size)];
    pieceCache.set(vocab, cache);
  }
  const table = cache[special ? 1 : 0];
  return (table[id] ??= computePiece(vocab, id, special));
}

/** Pieces per vocabulary, [plain, special], filled as tokens are first decoded. */
const pieceCache = new WeakMap<Vocab, [Uint8Array[], Uint8Array[]]>();

function computePiece(vocab: Vocab, id: number, special: boolean): Uint8Array {
  const text = vocab.tokens[id] as string;
  switch (vocab.types[id]) {
    case TokenType.control:
    case TokenType.unknown:
      return special ? Buffer.from(text, 'utf8') : EMPTY;
    case TokenType.userDefined:
      return Buffer.from(text, 'utf8');
    case TokenType.normal:
      return vocab.kind === 'spm'
        ? Buffer.from(text.replaceAll(SPACE_MARKER, ' '), 'utf8')
        : byteLevelBytes(text);
    case TokenType.byte: {
      // `<0xNN>` in both kinds of vocabulary (llama.cpp refuses other byte-token texts).
      const m = BYTE_TOKEN.exec(text);
      if (m) return Uint8Array.of(parseInt(m[1] as string, 16));
      return vocab.kind === 'bpe' ? byteLevelBytes(text) : Buffer.from(text, 'utf8');
    }
    default:
      return EMPTY;
  }
}

/** Byte-level BPE text back to bytes; characters outside the byte alphabet pass through as UTF-8. */
function byteLevelBytes(text: string): Uint8Array {
  const out: number[] = [];
  for (const c of text) {
    const b = CHAR_TO_BYTE.get(c);
    if (b !== undefined) out.push(b);
    else out.push(...Buffer.from(c, 'utf8'));
  }
  return Uint8Array.from(out);
}

export function checkTokenId(vocab: Vocab, id: number): void {
  if (!Number.isInteger(id) || id < 0 || id >= vocab.size)
    throw new TandemError(
      'TOKENIZER_TOKEN_ID',
      `token id ${id} is outside the vocabulary of ${vocab.size} tokens`,
      {
        hint: "pass ids produced by this model's tokenizer or sampler",
        details: { id, vocabSize: vocab.size },
      },
    );
}

/**
 * Turns tokens into text incrementally: bytes of a character split across tokens are held back
 * until the character completes, so each chunk is whole characters.
 */
export class StreamDecoder {
  private readonly decoder = new TextDecoder('utf-8');

  constructor(
    private readonly vocab: Vocab,
    private readonly special: boolean,
  ) {}

  /** Text completed by this token (possibly empty). */
  push(id: number): string {
    checkTokenId(this.vocab, id);
    return this.decoder.decode(pieceBytes(this.vocab, id, this.special), { stream: true });
  }

  /** Whatever is still held back, with U+FFFD for an incomplete character. */
  flush(): string {
    return this.decoder.decode();
  }
}
