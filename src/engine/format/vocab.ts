import { gv } from './gguf-writer.js';
import type { GgufValue } from './gguf-types.js';
import { VOCAB_TEXT } from './vocab-text.js';

/** llama.cpp's token types (llama_token_type). */
export const TokenType = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

export interface Vocab {
  /** tokenizer.ggml.model: `llama` (SentencePiece) or `gpt2` (byte-level BPE). */
  model: 'llama' | 'gpt2';
  /** tokenizer.ggml.pre for BPE vocabularies. */
  pre?: string;
  tokens: string[];
  scores?: Float32Array;
  tokenTypes: Int32Array;
  merges?: string[];
  bos: number;
  eos: number;
  unk?: number;
  addBos: boolean;
  addSpacePrefix?: boolean;
  chatTemplate: string;
}

/** Pieces never cross a letter/digit/punctuation boundary, like SentencePiece's script split. */
function pieces(word: string): string[] {
  return word.match(/\p{L}+|\p{N}|[^\p{L}\p{N}]+/gu) ?? [];
}

/**
 * Learns BPE merges from word counts: repeatedly joins the most frequent adjacent pair
 * (ties broken by the pair's text, so the result is deterministic).
 */
export function learnMerges(
  words: ReadonlyMap<string, number>,
  maxMerges: number,
  initial: (w: string) => string[] = (w) => Array.from(w),
): [string, string][] {
  const entries = [...words].map(([w, n]) => ({ symbols: initial(w), n }));
  const merges: [string, string][] = [];
  while (merges.length < maxMerges) {
    const counts = new Map<string, number>();
    for (const { symbols, n } of entries) {
      for (let i = 0; i + 1 < symbols.length; i++) {
        const key = `${symbols[i]}\u0000${symbols[i + 1]}`;
        counts.set(key, (counts.get(key) ?? 0) + n);
      }
    }
    let best: string | undefined;
    let bestCount = 0;
    for (const [key, c] of counts)
      if (c > bestCount || (c === bestCount && best !== undefined && key < best))
        [best, bestCount] = [key, c];
    if (best === undefined) break;
    const [a, b] = best.split('\u0000') as [string, string];
    merges.push([a, b]);
    for (const e of entries) {
      const out: string[] = [];
      for (let i = 0; i < e.symbols.length; i++) {
        if (e.symbols[i] === a && e.symbols[i + 1] === b) {
          out.push(a + b);
          i++;
        } else out.push(e.symbols[i] as string);
      }
      e.symbols = out;
    }
  }
  return merges;
}

/**
 * Tops a vocabulary up to `size` with extra merges (an existing token + one letter), so a
 * shape that needs e.g. 32000 tokens gets them; each new token is reachable by its merge.
 */
function padMerges(
  known: Set<string>,
  merges: [string, string][],
  size: number,
  allLetters: string[],
  prefix: (t: string) => boolean,
): void {
  const letters = allLetters.filter((l) => known.has(l));
  const bases = [...known].filter(prefix);
  for (let round = 0; known.size < size && round < 8; round++) {
    const next: string[] = [];
    for (const base of bases) {
      for (const l of letters) {
        if (known.size >= size) return;
        const t = base + l;
        if (known.has(t)) continue;
        known.add(t);
        merges.push([base, l]);
        next.push(t);
      }
    }
    bases.splice(0, bases.length, ...next);
  }
}

function wordCounts(split: (text: string) => string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const w of split(VOCAB_TEXT)) counts.set(w, (counts.get(w) ?? 0) + 1);
  return counts;
}

const LETTERS = 'etaoinshrdlcumwfgypbvkjxqz'.split('');

export const SPM_CHAT_TEMPLATE =
  "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'system' %}{{ '<<SYS>>\\n' + message['content'] + '\\n<</SYS>>\\n\\n' }}{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}";

export const CHATML_TEMPLATE =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/**
 * A SentencePiece-style `llama` vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then
 * pieces learned from VOCAB_TEXT ('▁' marks a word start) scored by merge order, then the
 * single characters. Exactly `size` tokens (at least 512).
 */
export function buildSpmVocab(size = 4096): Vocab {
  const words = wordCounts((text) =>
    text
      .split(/\s+/)
      .filter(Boolean)
      .flatMap((w, _i) => pieces(w).map((p, j) => (j === 0 ? '▁' + p : p))),
  );
  const chars = [...new Set([...words.keys()].flatMap((w) => Array.from(w)))].sort();
  const fixed = 3 + 256 + chars.length;
  const merges = learnMerges(words, Math.max(0, size - fixed));
  const known = new Set<string>(chars);
  const learned: string[] = [];
  for (const [a, b] of merges) {
    if (known.has(a + b)) continue;
    known.add(a + b);
    learned.push(a + b);
  }
  const extra: [string, string][] = [];
  padMerges(known, extra, size - 259, LETTERS, (t) => t.startsWith('▁') && t.length > 1);
  // a loop, not push(...): a 128k vocabulary's merges overflow the stack as arguments
  for (const [a, b] of extra) learned.push(a + b);
  const tokens = ['<unk>', '<s>', '</s>'];
  const types: number[] = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL];
  const scores = [0, 0, 0];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    types.push(TokenType.BYTE);
    scores.push(0);
  }
  learned.forEach((t, i) => {
    tokens.push(t);
    types.push(TokenType.NORMAL);
    scores.push(-i);
  });
  chars.forEach((c, i) => {
    tokens.push(c);
    types.push(TokenType.NORMAL);
    scores.push(-learned.length - i);
  });
  return {
    model: 'llama',
    tokens: tokens.slice(0, size),
    scores: Float32Array.from(scores.slice(0, size)),
    tokenTypes: Int32Array.from(types.slice(0, size)),
    bos: 1,
    eos: 2,
    unk: 0,
    addBos: true,
    addSpacePrefix: true,
    chatTemplate: SPM_CHAT_TEMPLATE,
  };
}

/** GPT-2's reversible byte -> printable character map (space -> 'Ġ', newline -> 'Ċ'). */
export function bytesToUnicode(): string[] {
  const map: string[] = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    map[b] = String.fromCodePoint(printable ? b : 256 + extra++);
  }
  return map;
}

/** The Llama 3 pre-tokenizer split (without its case-insensitive contractions group, which JS lacks). */
const LLAMA3_SPLIT =
  /'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu;

export const BPE_SPECIAL_TOKENS = ['<|begin_of_text|>', '<|end_of_text|>', '<|im_start|>', '<|im_end|>'];

/**
 * A byte-level BPE `gpt2` vocabulary: the 256 byte characters, tokens learned from
 * VOCAB_TEXT with their merges, then the special tokens. Exactly `size` tokens.
 */
export function buildBpeVocab(size = 4096, pre: 'llama-bpe' | 'qwen2' = 'llama-bpe'): Vocab {
  const b2u = bytesToUnicode();
  const enc = new TextEncoder();
  const words = wordCounts((text) =>
    (text.match(LLAMA3_SPLIT) ?? []).map((w) => Array.from(enc.encode(w), (b) => b2u[b] as string).join('')),
  );
  const room = size - 256 - BPE_SPECIAL_TOKENS.length;
  const merges = learnMerges(words, room);
  const known = new Set<string>(b2u);
  const kept: [string, string][] = [];
  for (const [a, b] of merges) {
    if (known.has(a + b)) continue;
    known.add(a + b);
    kept.push([a, b]);
  }
  padMerges(known, kept, size - BPE_SPECIAL_TOKENS.length, LETTERS, (t) => t.startsWith('Ġ') && t.length > 1);
  const tokens = [...b2u, ...kept.map(([a, b]) => a + b), ...BPE_SPECIAL_TOKENS];
  const types = tokens.map((_, i) =>
    i >= tokens.length - BPE_SPECIAL_TOKENS.length ? TokenType.CONTROL : TokenType.NORMAL,
  );
  const bos = tokens.length - 4;
  return {
    model: 'gpt2',
    pre,
    tokens,
    tokenTypes: Int32Array.from(types),
    merges: kept.map(([a, b]) => `${a} ${b}`),
    bos,
    eos: pre === 'qwen2' ? tokens.length - 1 : bos + 1,
    addBos: pre !== 'qwen2',
    chatTemplate: CHATML_TEMPLATE,
  };
}

/** The tokenizer.* metadata llama.cpp reads for this vocabulary. */
export function vocabMetadata(v: Vocab): [string, GgufValue][] {
  const out: [string, GgufValue][] = [['tokenizer.ggml.model', gv.str(v.model)]];
  if (v.pre !== undefined) out.push(['tokenizer.ggml.pre', gv.str(v.pre)]);
  out.push(['tokenizer.ggml.tokens', gv.strings(v.tokens)]);
  if (v.scores) out.push(['tokenizer.ggml.scores', gv.f32s(v.scores)]);
  out.push(['tokenizer.ggml.token_type', gv.i32s(v.tokenTypes)]);
  if (v.merges) out.push(['tokenizer.ggml.merges', gv.strings(v.merges)]);
  out.push(['tokenizer.ggml.bos_token_id', gv.u32(v.bos)], ['tokenizer.ggml.eos_token_id', gv.u32(v.eos)]);
  if (v.unk !== undefined) out.push(['tokenizer.ggml.unknown_token_id', gv.u32(v.unk)]);
  out.push(
    ['tokenizer.ggml.add_bos_token', gv.bool(v.addBos)],
    ['tokenizer.ggml.add_eos_token', gv.bool(false)],
  );
  if (v.addSpacePrefix !== undefined)
    out.push(['tokenizer.ggml.add_space_prefix', gv.bool(v.addSpacePrefix)]);
  out.push(['tokenizer.chat_template', gv.str(v.chatTemplate)]);
  return out;
}
