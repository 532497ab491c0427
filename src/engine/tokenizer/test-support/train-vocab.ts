// Builds small but realistic vocabularies for tests by training BPE merges on a corpus:
// a SentencePiece one (scores, byte fallback, U+2581) and a byte-level BPE one (merges).
import { BYTE_TO_CHAR } from '../bpe.js';
import { TokenType, type TokenizerMetadata } from '../metadata.js';
import { preTokenizerFor } from '../pre-tokenizer.js';
import { SPACE_MARKER } from '../spm.js';

export const CORPUS = [
  'The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away!',
  "It's a test: we're testing the tokenizer, and they've said it'll work. I'm sure.",
  'Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14159 1,000,000 and 12345678.',
  'Code: function add(a, b) { return a + b; } // comment\n\tindent();\n    four_spaces = [1, 2];',
  'Unicode: café naïve résumé Ünïcödé — “quotes” and ‘apostrophes’ … ½ ° € £',
  '日本語のテキストです。中文测试文本。한국어 텍스트. Привет мир! Γειά σου κόσμε.',
  'Emoji: 😀 😃 👍 🎉 ❤️ 🚀 and flags 🇫🇷.',
  'Whitespace:  two  spaces,   three,\n\nnew paragraph\r\nwindows line end.',
].join('\n');

/** Greedy pair merging: each round merges the most frequent adjacent pair (ties: smallest). */
function trainMerges(words: Map<string[], number>, rounds: number): [string, string][] {
  const merges: [string, string][] = [];
  for (let r = 0; r < rounds; r++) {
    const counts = new Map<string, number>();
    for (const [syms, freq] of words)
      for (let i = 1; i < syms.length; i++) {
        const key = `${syms[i - 1]}\u0000${syms[i]}`;
        counts.set(key, (counts.get(key) ?? 0) + freq);
      }
    let best: string | undefined;
    let bestCount = 1;
    for (const [key, c] of counts)
      if (c > bestCount || (c === bestCount && best !== undefined && key < best))
        [best, bestCount] = [key, c];
    if (best === undefined) break;
    const [a, b] = best.split('\u0000') as [string, string];
    merges.push([a, b]);
    for (const syms of words.keys())
      for (let i = 1; i < syms.length; i++)
        if (syms[i - 1] === a && syms[i] === b) {
          syms.splice(i - 1, 2, a + b);
        }
  }
  return merges;
}

function countWords(words: string[], split: (w: string) => string[]): Map<string[], number> {
  const freq = new Map<string, number>();
  for (const w of words) freq.set(w, (freq.get(w) ?? 0) + 1);
  return new Map([...freq].map(([w, f]) => [split(w), f]));
}

/** A SentencePiece-style ('llama') vocabulary with byte fallback and a few special tokens. */
export function trainSpmVocab(rounds = 300): TokenizerMetadata {
  const tokens: string[] = ['<unk>', '<s>', '</s>'];
  const types: number[] = [TokenType.unknown, TokenType.control, TokenType.control];
  const scores: number[] = [0, 0, 0];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    types.push(TokenType.byte);
    scores.push(0);
  }
  const words = CORPUS.split(' ').map((w) => SPACE_MARKER + w);
  const merges = trainMerges(
    countWords(words, (w) => Array.from(w)),
    rounds,
  );
  const seen = new Set<string>();
  merges.forEach(([a, b], i) => {
    if (seen.has(a + b)) return;
    seen.add(a + b);
    tokens.push(a + b);
    types.push(TokenType.normal);
    scores.push(-i);
  });
  // Single characters, but not all: some corpus characters are left to byte fallback.
  const chars = [...new Set(Array.from(CORPUS.replaceAll(' ', SPACE_MARKER)))].filter(
    (c, i) => (i % 7 !== 3 || c === SPACE_MARKER) && !seen.has(c),
  );
  chars.forEach((c, i) => {
    tokens.push(c);
    types.push(TokenType.normal);
    scores.push(-rounds - i);
  });
  for (const [text, type] of [
    ['<|im_start|>', TokenType.control],
    ['<|im_end|>', TokenType.control],
    ['<tool>', TokenType.userDefined],
  ] as const) {
    tokens.push(text);
    types.push(type);
    scores.push(0);
  }
  return {
    model: 'llama',
    tokens,
    scores,
    tokenTypes: types,
    bosTokenId: 1,
    eosTokenId: 2,
    unknownTokenId: 0,
    addBosToken: true,
  };
}

/** A byte-level BPE ('gpt2') vocabulary for the given pre-tokenizer, with special tokens. */
export function trainBpeVocab(
  pre: 'llama-bpe' | 'qwen2' | 'gpt-2' | 'default',
  rounds = 400,
): TokenizerMetadata {
  const tokens: string[] = [...BYTE_TO_CHAR];
  const byteLevel = (w: string): string =>
    Array.from(Buffer.from(w, 'utf8'), (b) => BYTE_TO_CHAR[b] as string).join('');
  const words = preTokenizerFor(pre).split(CORPUS).map(byteLevel);
  const merges = trainMerges(
    countWords(words, (w) => Array.from(w)),
    rounds,
  );
  for (const [a, b] of merges) if (!tokens.includes(a + b)) tokens.push(a + b);
  const types: number[] = tokens.map(() => TokenType.normal);
  const specials =
    pre === 'llama-bpe'
      ? ['<|begin_of_text|>', '<|end_of_text|>', '<|eot_id|>', '<|start_header_id|>', '<|end_header_id|>']
      : ['<|endoftext|>', '<|im_start|>', '<|im_end|>'];
  const bos = tokens.length;
  for (const s of specials) {
    tokens.push(s);
    types.push(TokenType.control);
  }
  tokens.push('<tool_call>');
  types.push(TokenType.userDefined);
  return {
    model: 'gpt2',
    pre,
    tokens,
    tokenTypes: types,
    merges: merges.map(([a, b]) => `${a} ${b}`),
    bosTokenId: bos,
    eosTokenId: bos + 1,
    addBosToken: pre === 'llama-bpe',
  };
}

/** The same vocabulary with these texts present as normal-typed tokens (appended when missing). */
export function withNormalTokens(meta: TokenizerMetadata, texts: readonly string[]): TokenizerMetadata {
  const tokens = [...meta.tokens];
  const types = Array.from(meta.tokenTypes ?? tokens.map(() => TokenType.normal));
  const scores = meta.scores === undefined ? undefined : Array.from(meta.scores);
  for (const text of texts) {
    const at = tokens.indexOf(text);
    if (at >= 0) {
      types[at] = TokenType.normal;
      continue;
    }
    tokens.push(text);
    types.push(TokenType.normal);
    scores?.push(0);
  }
  return { ...meta, tokens, tokenTypes: types, ...(scores === undefined ? {} : { scores }) };
}
