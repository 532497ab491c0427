import { TandemError } from '../../errors/index.js';
import { TokenType, type TokenizerMetadata } from './metadata.js';

/**
 * Hugging Face `tokenizer.json` (the `tokenizers` library's file) mapped onto the GGUF
 * tokenizer keys the engine reads, as llama.cpp's converter maps them:
 * - a BPE model with `byte_fallback` and SentencePiece's '▁' space marker (Llama 2, Mistral)
 *   becomes `llama`: tokens by id, `<0xXX>` pieces typed BYTE, and scores that rank each piece
 *   by its first merge (score = -rank), so SentencePiece's highest-score-first merging picks
 *   the pairs BPE's lowest-rank-first merging picks;
 * - a byte-level BPE model (Llama 3, Qwen2/3) becomes `gpt2` with its merges, and `pre` names
 *   the pre-tokenizer its Split regex is (llama-bpe, qwen2) or plain GPT-2;
 * - `added_tokens` marked special are CONTROL, other added tokens USER_DEFINED, the unk token
 *   UNKNOWN; BOS/EOS and add_bos come from tokenizer_config.json (else config.json's ids and
 *   the post-processor's template), the chat template from tokenizer_config.json.
 */
export interface HfTokenizerFiles {
  /** tokenizer.json, parsed. */
  tokenizer: unknown;
  /** tokenizer_config.json, parsed, when the folder has one. */
  tokenizerConfig?: unknown;
  /** config.json, parsed. */
  config?: unknown;
  /** The folder, for messages. */
  where: string;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function bad(where: string, field: string, what: string): TandemError {
  return new TandemError('MODEL_FOLDER_UNSUPPORTED', `${where}: tokenizer.json ${field} ${what}`, {
    hint: 'use the tokenizer.json the model repository ships (a BPE tokenizer: Llama, Mistral, Qwen)',
    details: { file: where, field },
  });
}

/** The pre-tokenizer regexes llama.cpp names (`tokenizer.ggml.pre`), told apart by the parts that differ. */
function preOf(pre: unknown, where: string): string {
  const parts: Obj[] =
    isObj(pre) && Array.isArray(pre.pretokenizers) ? (pre.pretokenizers as Obj[]) : isObj(pre) ? [pre] : [];
  const split = parts.find((p) => p.type === 'Split');
  const pattern = isObj(split?.pattern) ? (split.pattern as Obj).Regex : undefined;
  if (typeof pattern === 'string') {
    if (pattern.includes('[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|')) return 'llama-bpe';
    if (pattern.includes('[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|')) return 'qwen2';
    throw bad(where, 'pre_tokenizer', `splits by a regex tandem does not know (${pattern.slice(0, 80)})`);
  }
  if (parts.some((p) => p.type === 'ByteLevel' && p.use_regex !== false)) return 'gpt-2';
  throw bad(where, 'pre_tokenizer', 'is neither a known Split regex nor ByteLevel');
}

/** A token named in tokenizer_config.json: a string, or an AddedToken object with `content`. */
function tokenText(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (isObj(v) && typeof v.content === 'string') return v.content;
  return undefined;
}

/** Whether the input uses SentencePiece's '▁' space marker (Metaspace, or Prepend+Replace normalizers). */
function spaceMarker(t: Obj): { spm: boolean; prefix: boolean } {
  const flat = (v: unknown): Obj[] =>
    isObj(v)
      ? [
          v,
          ...(Array.isArray(v.normalizers)
            ? v.normalizers
            : Array.isArray(v.pretokenizers)
              ? v.pretokenizers
              : []
          ).flatMap(flat),
        ]
      : [];
  const all = [...flat(t.normalizer), ...flat(t.pre_tokenizer)];
  const meta = all.find((n) => n.type === 'Metaspace');
  if (meta) return { spm: true, prefix: meta.prepend_scheme !== 'never' && meta.add_prefix_space !== false };
  const replace = all.some((n) => n.type === 'Replace' && tokenText(n.content) === '▁');
  return { spm: replace, prefix: all.some((n) => n.type === 'Prepend' && n.prepend === '▁') };
}

function vocabOf(model: Obj, added: Obj[], where: string): string[] {
  if (!isObj(model.vocab)) throw bad(where, 'model.vocab', 'is missing or not an object');
  const tokens: string[] = [];
  const put = (text: string, id: unknown): void => {
    if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0 || id > 1 << 24)
      throw bad(where, `token ${JSON.stringify(text)}`, `has id ${String(id)}`);
    tokens[id] = text;
  };
  for (const [text, id] of Object.entries(model.vocab)) put(text, id);
  for (const a of added) put(String(a.content), a.id);
  for (let i = 0; i < tokens.length; i++) if (tokens[i] === undefined) tokens[i] = `[PAD${i}]`;
  return tokens;
}

function mergesOf(model: Obj, where: string): string[] {
  const merges = model.merges ?? [];
  if (!Array.isArray(merges)) throw bad(where, 'model.merges', 'is not a list');
  return merges.map((m) => {
    if (typeof m === 'string') return m;
    if (Array.isArray(m) && m.length === 2) return `${m[0]} ${m[1]}`;
    throw bad(where, 'model.merges', `holds ${JSON.stringify(m)}`);
  });
}

/** SentencePiece scores equivalent to BPE merge ranks: -rank of a piece's first merge, unmerged pieces last. */
function spmScores(tokens: readonly string[], merges: readonly string[]): Float32Array {
  const rank = new Map<string, number>();
  merges.forEach((m, i) => {
    const piece = m.replace(' ', '');
    if (!rank.has(piece)) rank.set(piece, i);
  });
  return Float32Array.from(tokens, (t, id) => -(rank.get(t) ?? merges.length + id));
}

/** Whether the post-processor's single-sequence template starts with `bos`; undefined without a template. */
function templateAddsBos(post: unknown, bos: string | undefined): boolean | undefined {
  const procs = isObj(post) && Array.isArray(post.processors) ? (post.processors as unknown[]) : [post];
  const tp = procs.find((p): p is Obj => isObj(p) && p.type === 'TemplateProcessing');
  if (tp === undefined || !Array.isArray(tp.single)) return undefined;
  const first: unknown = tp.single[0];
  return isObj(first) && isObj(first.SpecialToken) && first.SpecialToken.id === bos;
}

/** The ids of BOS and EOS, and whether BOS is added, from tokenizer_config.json then config.json. */
function specialIds(
  f: HfTokenizerFiles,
  t: Obj,
  tokens: readonly string[],
  ids: Map<string, number>,
  spm: boolean,
): Partial<TokenizerMetadata> {
  const tc = isObj(f.tokenizerConfig) ? f.tokenizerConfig : {};
  const mc = isObj(f.config) ? f.config : {};
  const out: Partial<TokenizerMetadata> = {};
  const idOf = (name: 'bos' | 'eos'): number | undefined => {
    const text = tokenText(tc[`${name}_token`]);
    if (text !== undefined && ids.has(text)) return ids.get(text);
    const id = mc[`${name}_token_id`];
    return typeof id === 'number' ? id : Array.isArray(id) && typeof id[0] === 'number' ? id[0] : undefined;
  };
  const bos = idOf('bos');
  const eos = idOf('eos');
  if (bos !== undefined) out.bosTokenId = bos;
  if (eos !== undefined) out.eosTokenId = eos;
  const bosText = bos === undefined ? undefined : tokens[bos];
  out.addBosToken =
    typeof tc.add_bos_token === 'boolean'
      ? tc.add_bos_token
      : (templateAddsBos(t.post_processor, bosText) ?? spm);
  out.addEosToken = tc.add_eos_token === true;
  const template = tc.chat_template;
  if (typeof template === 'string') out.chatTemplate = template;
  else if (Array.isArray(template)) {
    const def = template.find((x) => isObj(x) && x.name === 'default') as Obj | undefined;
    if (typeof def?.template === 'string') out.chatTemplate = def.template;
  }
  return out;
}

/** Reads a folder's tokenizer files into the GGUF tokenizer metadata (see the file comment). */
export function tokenizerMetadataFromHf(f: HfTokenizerFiles): TokenizerMetadata {
  const t = f.tokenizer;
  if (!isObj(t) || !isObj(t.model)) throw bad(f.where, 'model', 'is missing');
  const model = t.model;
  if (model.type !== 'BPE')
    throw bad(f.where, 'model.type', `is ${JSON.stringify(model.type)}; only BPE is supported`);
  const added = (Array.isArray(t.added_tokens) ? t.added_tokens : []).filter(isObj);
  const tokens = vocabOf(model, added, f.where);
  const merges = mergesOf(model, f.where);
  const ids = new Map(tokens.map((text, id) => [text, id]));
  const { spm, prefix } = spaceMarker(t);
  const unk = typeof model.unk_token === 'string' ? ids.get(model.unk_token) : undefined;
  const types = Int32Array.from(tokens, (text) =>
    spm && model.byte_fallback === true && /^<0x[0-9A-F]{2}>$/.test(text) ? TokenType.byte : TokenType.normal,
  );
  for (const a of added)
    types[a.id as number] = a.special === true ? TokenType.control : TokenType.userDefined;
  if (unk !== undefined) types[unk] = TokenType.unknown;
  const meta: TokenizerMetadata = spm
    ? { model: 'llama', tokens, scores: spmScores(tokens, merges), tokenTypes: types, addSpacePrefix: prefix }
    : { model: 'gpt2', pre: preOf(t.pre_tokenizer, f.where), tokens, tokenTypes: types, merges };
  if (unk !== undefined) meta.unknownTokenId = unk;
  return { ...meta, ...specialIds(f, t, tokens, ids, spm) };
}
