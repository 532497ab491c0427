// Proof against llama.cpp: our tokenizers must produce exactly llama.cpp's token ids (and
// detokenized text) on vocabularies the test trains and writes to GGUF files itself.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { GgufFile } from '../format/gguf-reader.js';
import { VOCAB_TEXT } from '../format/vocab-text.js';
import { Rng } from '../sampling/rng.js';
import {
  buildBpeVocab,
  buildSpmVocab,
  vocabMetadata,
  type Vocab as MakeModelVocab,
} from '../format/vocab.js';
import { tokenizerMetadataFromGguf, type TokenizerMetadata } from './metadata.js';
import { askLlamaCpp, type OracleAnswer, type OracleJob } from './test-support/llama-oracle.js';
import { CORPUS, trainBpeVocab, trainSpmVocab, withNormalTokens } from './test-support/train-vocab.js';
import { tokenizerEntries, vocabModelBytes } from './test-support/vocab-model.js';
import { Tokenizer } from './tokenizer.js';

const FUZZED = 150;
const TEXTS = [
  CORPUS,
  VOCAB_TEXT.slice(0, 3000),
  ...fuzzStrings(FUZZED, 2024),
  '',
  'Hello world',
  'hello World! The quick brown fox.',
  ' leading space',
  'trailing space ',
  '  two  spaces   three',
  '   ',
  ' ',
  '\n',
  '\n\n\n',
  'line one\nline two\r\nline three\n\n',
  '\tindent();\n    four_spaces = [1, 2];',
  'a  \n  b',
  '   \n\n   x',
  '123',
  '1234567',
  '3.14159 and 1,000,000',
  'x=42;y=7',
  "It's I'm we'll they've don't he'd",
  "HELLO'S WE'RE",
  'punctuation!!! ??? ... ,,, ;;; (brackets) {braces} [squares]',
  'émigré café naïve résumé',
  'Ünïcödé — “quotes” ‘single’ … ½ ° € £',
  '日本語のテキストです。',
  '中文测试文本和未知字符龘',
  '한국어 텍스트',
  'Привет мир! Γειά σου κόσμε.',
  'emoji 😀👍🏽 🎉 ❤️ 🇫🇷 🦀',
  'mixed 中文 and English 123 😀!',
  '\u00a0nbsp\u2003em-space\u3000ideographic',
  'zero\u200bwidth and ﬁ ligature',
  '<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n',
  '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>',
  'a<tool>b <tool> c',
  'call <tool_call>{"x": 1}</tool_call>',
  '<s>x</s> and <unk> inside',
  '<|im_end|><|im_end|>',
  'The dog sleeps; the fox runs away!',
  "quote ' here and ' 's ' 're ' 't 'll . , ? !",
  'a . b , c ? d ! e  . f',
  '$100 + 5^2 <= ~x | y',
  'The harbor town woke slowly on the first cold morning of the year.',
  'fim <|fim_prefix|>x<PAD> <|file_sep|> <|channel|>a<end_of_turn><|endoftext|>',
];

/** Seeded random strings over an alphabet that stresses the pre-tokenizers and merges. */
function fuzzStrings(count: number, seed: number): string[] {
  const rng = new Rng(seed);
  const alphabet = Array.from(
    "aeiou tnrshdlTHE  \n\n\r\t'sS'llREve0123456789.,!?;:-_()[]{}<>|/\\\"$%^&*+=~`@#é中文本日語😀👍🏽\u0301\u00a0\u3000\u200b\u0085\ufeff\u000b\u000c\u001c\u2028ΩЖ½",
  );
  return Array.from({ length: count }, () => {
    const n = rng.nextU32() % 24;
    let out = '';
    for (let i = 0; i < n; i++) out += alphabet[rng.nextU32() % alphabet.length] as string;
    return out;
  });
}

/** Texts llama.cpp makes control tokens whatever their type (one spelling per FIM role). */
const LOOKS_CONTROL = [
  '<|im_end|>',
  '<|endoftext|>',
  '<end_of_turn>',
  '</s>',
  '<|fim_prefix|>',
  '<PAD>',
  '<|file_sep|>',
  '<|channel|>',
];

interface Case {
  name: string;
  /** The GGUF file both sides read: llama.cpp from disk, ours through the GGUF reader. */
  file: Uint8Array;
}

const fromMeta = (name: string, meta: TokenizerMetadata): Case => ({
  name,
  file: vocabModelBytes(tokenizerEntries(meta), meta.tokens.length),
});
const fromMakeModel = (name: string, v: MakeModelVocab): Case => ({
  name: `${name} from make-model`,
  file: vocabModelBytes(vocabMetadata(v), v.tokens.length),
});

const CASES: Case[] = [
  fromMeta('SentencePiece (llama)', trainSpmVocab()),
  fromMeta('SentencePiece without add_space_prefix', { ...trainSpmVocab(), addSpacePrefix: false }),
  fromMeta('BPE (gpt2, llama-bpe)', trainBpeVocab('llama-bpe')),
  fromMeta('BPE (gpt2, qwen2)', trainBpeVocab('qwen2')),
  fromMeta('BPE (gpt2, gpt-2)', trainBpeVocab('gpt-2')),
  fromMeta('BPE (gpt2, default)', trainBpeVocab('default')),
  fromMeta(
    'BPE with control-looking tokens typed normal',
    withNormalTokens(trainBpeVocab('qwen2'), LOOKS_CONTROL),
  ),
  fromMeta(
    'SentencePiece with control-looking tokens typed normal',
    withNormalTokens(trainSpmVocab(), LOOKS_CONTROL),
  ),
  fromMakeModel('SentencePiece', buildSpmVocab()),
  fromMakeModel('BPE llama-bpe', buildBpeVocab(4096, 'llama-bpe')),
  fromMakeModel('BPE qwen2', buildBpeVocab(4096, 'qwen2')),
];

describe('tokenization matches llama.cpp', { timeout: 120_000 }, () => {
  let dir = '';
  let answers: OracleAnswer[] = [];
  const tokenizers = CASES.map(
    (c) => new Tokenizer(tokenizerMetadataFromGguf(GgufFile.fromBytes(c.file, c.name).metadata.entries)),
  );
  // Decode requests: our own encodings plus sequences that split characters across tokens.
  const decodeInputs = tokenizers.map((tok) =>
    TEXTS.map((t) => tok.encode(t, { addBos: false, parseSpecial: true })),
  );

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tandem-tok-'));
    const jobs: OracleJob[] = CASES.map((c, i) => {
      const modelPath = join(dir, `vocab-${i}.gguf`);
      writeFileSync(modelPath, c.file);
      const ids = decodeInputs[i] as number[][];
      return {
        modelPath,
        tokenize: TEXTS.flatMap((text) => [
          { text, special: false },
          { text, special: true },
        ]),
        detokenize: ids.flatMap((seq) => [
          { ids: seq, special: false },
          { ids: seq, special: true },
        ]),
      };
    });
    answers = await askLlamaCpp(jobs, 90_000);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  CASES.forEach((c, i) => {
    it(`${c.name}: encode ${TEXTS.length} strings (${FUZZED} random), with and without special tokens`, () => {
      const tok = tokenizers[i] as Tokenizer;
      const answer = answers[i] as OracleAnswer;
      TEXTS.forEach((text, j) => {
        for (const [k, parseSpecial] of [false, true].entries()) {
          const ours = tok.encode(text, { addBos: false, parseSpecial });
          assert.deepEqual(
            ours,
            answer.tokenized[2 * j + k],
            `${JSON.stringify(text)} parseSpecial=${parseSpecial}`,
          );
        }
      });
    });

    it(`${c.name}: decode matches llama.cpp's detokenize`, () => {
      const tok = tokenizers[i] as Tokenizer;
      const answer = answers[i] as OracleAnswer;
      (decodeInputs[i] as number[][]).forEach((ids, j) => {
        for (const [k, special] of [false, true].entries()) {
          assert.equal(
            tok.decode(ids, { special }),
            answer.detokenized[2 * j + k],
            `${JSON.stringify(TEXTS[j])} special=${special}`,
          );
        }
      });
    });
  });

  it('BOS, EOS and the end-of-generation set match llama.cpp for every vocabulary', () => {
    CASES.forEach((c, i) => {
      const tok = tokenizers[i] as Tokenizer;
      const answer = answers[i] as OracleAnswer;
      assert.equal(tok.bosId ?? null, answer.bos, `${c.name} BOS`);
      assert.equal(tok.eosId ?? null, answer.eos, `${c.name} EOS`);
      const ours = Array.from({ length: tok.vocabSize }, (_, id) => id).filter((id) =>
        tok.isEndOfGeneration(id),
      );
      assert.deepEqual(ours, answer.eog, `${c.name} end of generation`);
    });
  });

  it('the vocabularies exercise merges, byte fallback and special tokens', () => {
    const spm = tokenizers[0] as Tokenizer;
    const ids = spm.encode('中文测试文本和未知字符龘', { addBos: false });
    assert.ok(
      ids.some((id) => /^<0x[0-9A-F]{2}>$/.test(spm.tokenText(id))),
      'byte fallback used',
    );
    const bpe = tokenizers[1] as Tokenizer;
    assert.ok(bpe.encode('the fox and the dog', { addBos: false }).length <= 6, 'merges shorten text');
  });
});
