import { TandemError } from '../../errors/index.js';

/**
 * Whitespace as llama.cpp's Unicode tables define it (not JS `\s`: that one adds U+FEFF and
 * lacks U+0085), written out so `\s` and `\S` below mean exactly that set.
 */
const WS = '\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';

/** Turns a pattern written with `\s`/`\S` into a JS Unicode regex using the WS set above. */
function re(source: string): RegExp {
  let out = '';
  let inClass = false;
  for (let i = 0; i < source.length; i++) {
    const c = source[i] as string;
    if (c === '\\' && (source[i + 1] === 's' || source[i + 1] === 'S')) {
      const neg = source[i + 1] === 'S';
      out += inClass ? WS : neg ? `[^${WS}]` : `[${WS}]`;
      i++;
      continue;
    }
    if (c === '\\') {
      out += c + (source[i + 1] ?? '');
      i++;
      continue;
    }
    if (c === '[') inClass = true;
    if (c === ']') inClass = false;
    out += c;
  }
  return new RegExp(out, 'gu');
}

const CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";

/** Pre-tokenizer regexes by `tokenizer.ggml.pre`; each later regex splits the pieces of the one before. */
const PRE_TOKENIZERS: Record<string, readonly string[]> = {
  default: [
    '[\\p{P}\\$\\+<=>\\^~\\|]+',
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    '\\p{N}+',
    '[0-9][0-9][0-9]',
  ],
  gpt2: ["'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"],
  llama3: [
    `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`,
  ],
  qwen2: [
    `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`,
  ],
};

/** `tokenizer.ggml.pre` values and the pre-tokenizer each selects. */
const PRE_NAMES: Record<string, string> = {
  default: 'default',
  'gpt-2': 'gpt2',
  'llama-bpe': 'llama3',
  llama3: 'llama3',
  'llama-v3': 'llama3',
  qwen2: 'qwen2',
  'deepseek-r1-qwen': 'qwen2',
};

export interface PreTokenizer {
  /** The resolved pre-tokenizer: 'default' | 'gpt2' | 'llama3' | 'qwen2'. */
  readonly name: string;
  split(text: string): string[];
}

/** The pre-tokenizer for a `tokenizer.ggml.pre` value; missing means llama.cpp's 'default'. */
export function preTokenizerFor(pre: string | undefined): PreTokenizer {
  const name = PRE_NAMES[pre ?? 'default'];
  if (name === undefined)
    throw new TandemError('TOKENIZER_UNSUPPORTED', `BPE pre-tokenizer '${pre}' is not supported`, {
      hint: `supported tokenizer.ggml.pre values: ${Object.keys(PRE_NAMES).join(', ')}`,
      details: { pre },
    });
  const regexes = (PRE_TOKENIZERS[name] as readonly string[]).map(re);
  return { name, split: (text) => splitAll(text, regexes) };
}

/** Applies each regex to every piece so far: matches and the gaps between them become pieces. */
function splitAll(text: string, regexes: readonly RegExp[]): string[] {
  let pieces = [text];
  for (const regex of regexes) {
    const next: string[] = [];
    for (const piece of pieces) {
      let from = 0;
      for (const m of piece.matchAll(regex)) {
        if (m[0].length === 0) continue;
        if (m.index > from) next.push(piece.slice(from, m.index));
        next.push(m[0]);
        from = m.index + m[0].length;
      }
      if (from < piece.length) next.push(piece.slice(from));
    }
    pieces = next;
  }
  return pieces;
}
