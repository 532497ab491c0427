import { TokenType } from './metadata.js';
import type { Vocab } from './vocab.js';

/** A piece of input: raw text still to tokenize, or a special token already matched. */
export type Fragment = { text: string } | { id: number };

/**
 * Splits text on special tokens, longest token first, each token taking all its leftmost
 * non-overlapping occurrences in the raw pieces left by longer ones (llama.cpp's order).
 * User-defined tokens always match; control and unknown tokens only with `parseSpecial`.
 * Never returns empty text fragments.
 */
export function partitionSpecial(vocab: Vocab, text: string, parseSpecial: boolean): Fragment[] {
  let fragments: Fragment[] = text.length > 0 ? [{ text }] : [];
  for (const id of vocab.specials) {
    const type = vocab.types[id];
    if (!parseSpecial && (type === TokenType.control || type === TokenType.unknown)) continue;
    const needle = vocab.tokens[id] as string;
    const next: Fragment[] = [];
    for (const f of fragments) {
      if (!('text' in f) || !f.text.includes(needle)) {
        next.push(f);
        continue;
      }
      let from = 0;
      for (let at = f.text.indexOf(needle); at >= 0; at = f.text.indexOf(needle, from)) {
        if (at > from) next.push({ text: f.text.slice(from, at) });
        next.push({ id });
        from = at + needle.length;
      }
      if (from < f.text.length) next.push({ text: f.text.slice(from) });
    }
    fragments = next;
  }
  return fragments;
}
