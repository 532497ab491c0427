import { TandemError } from '../../errors/index.js';
import { Heap } from './heap.js';
import type { PreTokenizer } from './pre-tokenizer.js';
import type { Vocab } from './vocab.js';

/**
 * GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the other bytes
 * map in order to U+0100 upwards, so every byte string is a printable string.
 */
export const BYTE_TO_CHAR: readonly string[] = (() => {
  const table: string[] = new Array<string>(256);
  const printable = (b: number): boolean =>
    (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  let extra = 0;
  for (let b = 0; b < 256; b++) table[b] = String.fromCharCode(printable(b) ? b : 256 + extra++);
  return table;
})();

export const CHAR_TO_BYTE: ReadonlyMap<string, number> = new Map(BYTE_TO_CHAR.map((c, b) => [c, b]));

interface Symbol {
  text: string;
  prev: number;
  next: number;
}

interface Bigram {
  left: number;
  right: number;
  rank: number;
  text: string;
}

/** Byte-level BPE over pre-tokenized words, merges applied by rank (lowest first, ties leftmost). */
export class BpeEncoder {
  private readonly ranks = new Map<string, number>();

  constructor(
    private readonly vocab: Vocab,
    merges: readonly string[],
    private readonly pre: PreTokenizer,
    /** Llama 3: a word that is already a token is emitted whole, without merging. */
    private readonly ignoreMerges: boolean,
  ) {
    merges.forEach((merge, rank) => {
      const space = merge.indexOf(' ', 1);
      if (space < 0)
        throw new TandemError(
          'TOKENIZER_METADATA',
          `tokenizer.ggml.merges[${rank}] = ${JSON.stringify(merge)} has no space`,
          {
            hint: 'each merge must read "left right"; re-convert the model',
            details: { key: 'tokenizer.ggml.merges', index: rank },
          },
        );
      const key = `${merge.slice(0, space)} ${merge.slice(space + 1)}`;
      if (!this.ranks.has(key)) this.ranks.set(key, rank);
    });
  }

  encode(text: string, out: number[]): void {
    for (const word of this.pre.split(text)) this.encodeWord(word, out);
  }

  private encodeWord(word: string, out: number[]): void {
    let encoded = '';
    for (const b of Buffer.from(word, 'utf8')) encoded += BYTE_TO_CHAR[b] as string;
    const whole = this.vocab.textToId.get(encoded);
    if (this.ignoreMerges && whole !== undefined) {
      out.push(whole);
      return;
    }
    // Every byte-level character is one UTF-16 unit (all are below U+0144).
    const symbols: Symbol[] = Array.from(encoded, (c, i) => ({
      text: c,
      prev: i - 1,
      next: i + 1 < encoded.length ? i + 1 : -1,
    }));
    const queue = new Heap<Bigram>((a, b) => a.rank < b.rank || (a.rank === b.rank && a.left < b.left));
    const tryAdd = (left: number, right: number): void => {
      if (left < 0 || right < 0) return;
      const l = (symbols[left] as Symbol).text;
      const r = (symbols[right] as Symbol).text;
      const rank = this.ranks.get(`${l} ${r}`);
      if (rank !== undefined) queue.push({ left, right, rank, text: l + r });
    };
    for (let i = 1; i < symbols.length; i++) tryAdd(i - 1, i);
    while (queue.size > 0) {
      const b = queue.pop() as Bigram;
      const l = symbols[b.left] as Symbol;
      const r = symbols[b.right] as Symbol;
      if (l.text.length === 0 || r.text.length === 0 || l.text + r.text !== b.text) continue;
      l.text += r.text;
      r.text = '';
      l.next = r.next;
      if (r.next >= 0) (symbols[r.next] as Symbol).prev = b.left;
      tryAdd(l.prev, b.left);
      tryAdd(b.left, l.next);
    }
    for (let i = 0; i !== -1 && i < symbols.length; i = (symbols[i] as Symbol).next) {
      const piece = (symbols[i] as Symbol).text;
      const id = this.vocab.textToId.get(piece);
      if (id !== undefined) {
        out.push(id);
        continue;
      }
      // As llama.cpp: fall back to single-character tokens; characters without one are dropped.
      for (const c of piece) {
        const single = this.vocab.textToId.get(c);
        if (single !== undefined && c.charCodeAt(0) < 0x80) out.push(single);
      }
    }
  }
}
