import { TandemError } from '../../errors/index.js';
import { Heap } from './heap.js';
import type { Vocab } from './vocab.js';

/** SentencePiece's whitespace marker, U+2581. */
export const SPACE_MARKER = '\u2581';

interface Symbol {
  text: string;
  prev: number;
  next: number;
}

interface Bigram {
  left: number;
  right: number;
  score: number;
  /** Length of the merged text; a mismatch marks the entry stale. */
  length: number;
}

const byteTokenText = (b: number): string => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`;

/** The token for one raw byte: `<0xNN>`, else the byte as a one-character token. */
export function byteToken(vocab: Vocab, byte: number): number {
  const id =
    vocab.textToId.get(byteTokenText(byte)) ??
    (byte < 0x80 ? vocab.textToId.get(String.fromCharCode(byte)) : undefined);
  if (id === undefined)
    throw new TandemError(
      'TOKENIZER_BYTE_FALLBACK',
      `the vocabulary has no token for byte 0x${byte.toString(16)} (${byteTokenText(byte)})`,
      {
        hint: 'this SentencePiece vocabulary lacks byte-fallback tokens; avoid characters outside it or use a vocabulary with <0x00>..<0xFF>',
        details: { byte },
      },
    );
  return id;
}

/**
 * SentencePiece BPE by score: start from characters, repeatedly merge the adjacent pair whose
 * concatenation is the highest-scoring token (ties: leftmost), then emit each piece, or its
 * UTF-8 bytes as `<0xNN>` tokens when the piece is not in the vocabulary.
 * `text` has spaces already replaced by U+2581.
 */
export function encodeSpm(vocab: Vocab, text: string, out: number[]): void {
  const chars = Array.from(text);
  const symbols: Symbol[] = chars.map((c, i) => ({
    text: c,
    prev: i - 1,
    next: i + 1 < chars.length ? i + 1 : -1,
  }));
  const queue = new Heap<Bigram>((a, b) => a.score > b.score || (a.score === b.score && a.left < b.left));
  const tryAdd = (left: number, right: number): void => {
    if (left < 0 || right < 0) return;
    const merged = (symbols[left] as Symbol).text + (symbols[right] as Symbol).text;
    const id = vocab.textToId.get(merged);
    if (id === undefined) return;
    queue.push({ left, right, score: vocab.scores[id] as number, length: merged.length });
  };
  for (let i = 1; i < symbols.length; i++) tryAdd(i - 1, i);
  while (queue.size > 0) {
    const b = queue.pop() as Bigram;
    const l = symbols[b.left] as Symbol;
    const r = symbols[b.right] as Symbol;
    if (l.text.length === 0 || r.text.length === 0 || l.text.length + r.text.length !== b.length) continue;
    l.text += r.text;
    r.text = '';
    l.next = r.next;
    if (r.next >= 0) (symbols[r.next] as Symbol).prev = b.left;
    tryAdd(l.prev, b.left);
    tryAdd(b.left, l.next);
  }
  for (let i = 0; i !== -1 && i < symbols.length; i = (symbols[i] as Symbol).next) {
    const piece = (symbols[i] as Symbol).text;
    const id = vocab.textToId.get(piece);
    if (id !== undefined) {
      out.push(id);
      continue;
    }
    for (const byte of Buffer.from(piece, 'utf8')) out.push(byteToken(vocab, byte));
  }
}
