import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TokenType } from './metadata.js';
import { Tokenizer } from './tokenizer.js';
import { tokenizerMetadataFromHf } from './tokenizer-json.js';

const bytes = Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);

/** A Mistral-style tokenizer.json: Metaspace pre-tokenizer, byte fallback, merges as pairs. */
function spmFiles(merges: unknown[]): Parameters<typeof tokenizerMetadataFromHf>[0] {
  const pieces = ['▁', 'h', 'e', 'l', 'o', 'll', '▁h', '▁he', 'llo', '▁hello'];
  const vocab: Record<string, number> = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  [...bytes, ...pieces].forEach((p, i) => (vocab[p] = 3 + i));
  return {
    tokenizer: {
      added_tokens: ['<unk>', '<s>', '</s>'].map((content, id) => ({ id, content, special: true })),
      normalizer: null,
      pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false },
      model: { type: 'BPE', unk_token: '<unk>', byte_fallback: true, vocab, merges },
    },
    tokenizerConfig: {
      bos_token: { content: '<s>', special: true },
      eos_token: '</s>',
      chat_template: [{ name: 'default', template: '{{ messages }}' }],
    },
    where: '/models/m',
  };
}

test('a SentencePiece-style tokenizer.json maps to a llama vocabulary: types, scores by merge rank, BOS', () => {
  const merges = [
    ['l', 'l'],
    ['▁', 'h'],
    ['▁h', 'e'],
    ['ll', 'o'],
    ['▁he', 'llo'],
  ];
  const m = tokenizerMetadataFromHf(spmFiles(merges));
  assert.equal(m.model, 'llama');
  assert.equal(m.tokens.length, 3 + 256 + 10);
  assert.deepEqual(
    [m.tokenTypes?.[0], m.tokenTypes?.[1], m.tokenTypes?.[3], m.tokenTypes?.[260]],
    [TokenType.unknown, TokenType.control, TokenType.byte, TokenType.normal],
  );
  const score = (t: string): number => m.scores![m.tokens.indexOf(t)]!;
  assert.ok(score('ll') > score('▁h') && score('▁h') > score('▁he') && score('▁he') > score('▁hello'));
  assert.deepEqual(
    [m.bosTokenId, m.eosTokenId, m.unknownTokenId, m.addBosToken, m.addSpacePrefix],
    [1, 2, 0, true, true],
  );
  assert.equal(m.chatTemplate, '{{ messages }}');
  const tok = new Tokenizer(m);
  assert.deepEqual(tok.encode('hello'), [1, m.tokens.indexOf('▁hello')]);
  // Merges as "a b" strings are the same file.
  const strings = tokenizerMetadataFromHf(spmFiles(merges.map((x) => x.join(' '))));
  assert.deepEqual(strings.scores, m.scores);
});

function bpeFiles(
  preTokenizer: unknown,
  extra: Record<string, unknown> = {},
): Parameters<typeof tokenizerMetadataFromHf>[0] {
  return {
    tokenizer: {
      added_tokens: [
        { id: 3, content: '<|begin_of_text|>', special: true },
        { id: 4, content: '<|custom|>', special: false },
      ],
      pre_tokenizer: preTokenizer,
      post_processor: {
        type: 'Sequence',
        processors: [
          { type: 'ByteLevel' },
          {
            type: 'TemplateProcessing',
            single: [
              { SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } },
              { Sequence: { id: 'A', type_id: 0 } },
            ],
          },
        ],
      },
      model: { type: 'BPE', vocab: { a: 0, b: 1, ab: 2 }, merges: ['a b'] },
    },
    tokenizerConfig: { bos_token: '<|begin_of_text|>', ...extra },
    config: { eos_token_id: [4, 3] },
    where: '/models/b',
  };
}

const split = (regex: string) => ({
  type: 'Sequence',
  pretokenizers: [
    { type: 'Split', pattern: { Regex: regex } },
    { type: 'ByteLevel', use_regex: false },
  ],
});

test('a byte-level tokenizer.json maps to gpt2 with the pre-tokenizer its regex names', () => {
  const llama3 = tokenizerMetadataFromHf(
    bpeFiles(split("(?i:'s)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?x")),
  );
  assert.deepEqual([llama3.model, llama3.pre, llama3.merges], ['gpt2', 'llama-bpe', ['a b']]);
  assert.deepEqual([llama3.bosTokenId, llama3.eosTokenId, llama3.addBosToken], [3, 4, true]);
  assert.deepEqual(Array.from(llama3.tokenTypes!), [1, 1, 1, TokenType.control, TokenType.userDefined]);
  const qwen = tokenizerMetadataFromHf(
    bpeFiles(split("(?i:'s)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?x"), { add_bos_token: false }),
  );
  assert.deepEqual([qwen.pre, qwen.addBosToken], ['qwen2', false]);
  assert.equal(tokenizerMetadataFromHf(bpeFiles({ type: 'ByteLevel', use_regex: true })).pre, 'gpt-2');
});

test('tokenizers tandem cannot reproduce are typed errors naming the part', () => {
  const unsupported = (f: Parameters<typeof tokenizerMetadataFromHf>[0], pattern: RegExp): void =>
    assert.throws(
      () => tokenizerMetadataFromHf(f),
      (e: Error & { code?: string }) => e.code === 'MODEL_FOLDER_UNSUPPORTED' && pattern.test(e.message),
    );
  unsupported(bpeFiles(split('\\w+|\\s+')), /pre_tokenizer splits by a regex/);
  unsupported(bpeFiles(null), /pre_tokenizer/);
  const wordPiece = bpeFiles(null);
  (wordPiece.tokenizer as { model: { type: string } }).model.type = 'WordPiece';
  unsupported(wordPiece, /model\.type.*WordPiece/);
});
