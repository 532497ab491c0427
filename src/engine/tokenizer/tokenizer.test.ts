import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isTandemError } from '../../errors/index.js';
import { GgufFile } from '../format/gguf-reader.js';
import type { GgufValue } from '../format/gguf-types.js';
import { gv } from '../format/gguf-writer.js';
import { buildBpeVocab, vocabMetadata } from '../format/vocab.js';
import { TokenType, tokenizerMetadataFromGguf, type TokenizerMetadata } from './metadata.js';
import { vocabModelBytes } from './test-support/vocab-model.js';
import { trainBpeVocab, trainSpmVocab } from './test-support/train-vocab.js';
import { Tokenizer } from './tokenizer.js';

/** A hand-made SentencePiece vocabulary small enough to work out results by hand. */
function tinySpm(): TokenizerMetadata {
  const tokens = ['<unk>', '<s>', '</s>'];
  const types: number[] = [TokenType.unknown, TokenType.control, TokenType.control];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    types.push(TokenType.byte);
  }
  // ids 259..: '▁' 'a' 'b' '▁a' 'ab' '<|im_start|>' '<tool>'
  for (const [t, type] of [
    ['▁', 1],
    ['a', 1],
    ['b', 1],
    ['▁a', 1],
    ['ab', 1],
    ['<|im_start|>', 3],
    ['<tool>', 4],
  ] as const) {
    tokens.push(t);
    types.push(type);
  }
  // Lower id, higher score: '▁a' (262) outranks 'ab' (263).
  return {
    model: 'llama',
    tokens,
    scores: tokens.map((_, i) => -i),
    tokenTypes: types,
    bosTokenId: 1,
    eosTokenId: 2,
  };
}

const codeOf = (fn: () => unknown): string => {
  try {
    fn();
  } catch (e) {
    if (isTandemError(e)) return e.code;
    throw e;
  }
  return 'no error';
};

describe('SentencePiece tokenizer', () => {
  const tok = new Tokenizer(tinySpm());

  it('merges the highest-scoring pair first and prefixes a space', () => {
    assert.deepEqual(tok.encode('ab', { addBos: false }), [262, 261]); // '▁a' 'b', not '▁' 'ab'
    assert.deepEqual(tok.encode(' ab', { addBos: false }), [259, 262, 261]);
  });

  it('falls back to UTF-8 byte tokens', () => {
    assert.deepEqual(tok.encode('é', { addBos: false }), [259, 3 + 0xc3, 3 + 0xa9]);
  });

  it('defaults to the llama.cpp ids when the file has none: unk 0, BOS 1, EOS 2', () => {
    const { bosTokenId: _b, eosTokenId: _e, ...bare } = tinySpm();
    const t = new Tokenizer(bare);
    assert.deepEqual([t.bosId, t.eosId, t.vocab.unknownId], [1, 2, 0]);
    assert.deepEqual(t.encode('a', { addEos: true }), [1, 262, 2]);
  });

  it('adds BOS by default and EOS on request', () => {
    assert.deepEqual(tok.encode('a'), [1, 262]);
    assert.deepEqual(tok.encode('a', { addEos: true }), [1, 262, 2]);
    assert.deepEqual(tok.encode(''), [1]);
    assert.deepEqual(tok.encode('', { addBos: false }), []);
  });

  it('matches control tokens only with parseSpecial, user-defined tokens always', () => {
    assert.deepEqual(
      tok.encode('a<|im_start|>b', { addBos: false, parseSpecial: true }),
      [262, 264, 259, 261],
    );
    assert.ok(!tok.encode('a<|im_start|>b', { addBos: false }).includes(264));
    assert.deepEqual(tok.encode('a<tool>b', { addBos: false }), [262, 265, 259, 261]);
  });

  it('decodes, stripping the added leading space and hiding control tokens', () => {
    assert.equal(tok.decode([262, 261]), 'ab');
    assert.equal(tok.decode([262, 261], { stripLeadingSpace: false }), ' ab');
    assert.equal(tok.decode([1, 262, 264, 265, 2]), ' a<tool>');
    assert.equal(tok.decode([1, 262, 264, 2], { special: true }), '<s> a<|im_start|></s>');
    assert.equal(tok.decode([3 + 0xc3, 3 + 0xa9]), 'é');
    assert.equal(tok.decode([3 + 0xc3]), '\ufffd');
  });

  it('streams characters split across byte tokens', () => {
    const ids = tok.encode('é😀', { addBos: false }); // '▁', 2 + 4 byte tokens
    assert.equal(ids.length, 7);
    const stream = tok.streamDecoder();
    const chunks = ids.map((id) => stream.push(id));
    assert.deepEqual(chunks, [' ', '', 'é', '', '', '', '😀']);
    assert.equal(stream.flush(), '');
    const cut = tok.streamDecoder();
    cut.push(3 + 0xf0);
    assert.equal(cut.flush(), '\ufffd');
  });

  it('round-trips text through a trained vocabulary', () => {
    const spm = new Tokenizer(trainSpmVocab());
    for (const text of [
      'The quick brown fox.',
      '  spaces\n\nand lines ',
      '日本語 😀 café',
      'zero\u200bwidth',
    ])
      assert.equal(spm.decode(spm.encode(text, { addBos: false })), text);
  });
});

describe('BPE tokenizer', () => {
  const tok = new Tokenizer(trainBpeVocab('llama-bpe'));
  const qwen = new Tokenizer(trainBpeVocab('qwen2'));

  it('round-trips text', () => {
    for (const text of ['The quick brown fox.', '  spaces\n\nand lines ', '日本語 😀 café', "it's 12345"])
      for (const t of [tok, qwen])
        assert.equal(t.decode(t.encode(text, { addBos: false }), { cleanSpaces: false }), text);
  });

  it('splits digits per pre-tokenizer: Llama 3 in threes, Qwen2 one by one', () => {
    const pieces = (t: Tokenizer, s: string): string[] =>
      t.encode(s, { addBos: false }).map((id) => t.decode([id]));
    assert.ok(pieces(tok, '1234567').every((p) => p.length <= 3));
    assert.deepEqual(pieces(qwen, '1234567'), ['1', '2', '3', '4', '5', '6', '7']);
  });

  it('adds BOS by default for Llama 3 only, and ends generation on EOS and end-of-turn tokens', () => {
    assert.equal(tok.encode('x')[0], tok.bosId);
    assert.notEqual(qwen.encode('x')[0], qwen.bosId);
    assert.ok(
      tok.isEndOfGeneration(tok.encode('<|eot_id|>', { addBos: false, parseSpecial: true })[0] as number),
    );
    assert.ok(
      qwen.isEndOfGeneration(qwen.encode('<|im_end|>', { addBos: false, parseSpecial: true })[0] as number),
    );
    assert.ok(!tok.isEndOfGeneration(tok.encode('x', { addBos: false })[0] as number));
  });

  it('decodes <0xNN> byte tokens to their byte, unused and undefined tokens to nothing', () => {
    const m = trainBpeVocab('qwen2');
    const n = m.tokens.length;
    const meta = {
      ...m,
      tokens: [...m.tokens, '<0x41>', 'zzunused', 'zzundef'],
      tokenTypes: [...Array.from(m.tokenTypes ?? []), TokenType.byte, TokenType.unused, TokenType.undefined],
    };
    const t = new Tokenizer(meta);
    assert.equal(t.decode([n]), 'A');
    assert.equal(t.decode([n + 1, n + 2], { special: true }), '');
  });

  it('cleans spaces before punctuation like llama.cpp, except for Qwen2', () => {
    const ids = tok.encode("a . b ' c 's", { addBos: false });
    assert.equal(tok.decode(ids), "a. b'c's");
    const q = qwen.encode('a . b', { addBos: false });
    assert.equal(qwen.decode(q), 'a . b');
  });
});

describe('tokenizer errors', () => {
  it('rejects unsupported models and pre-tokenizers', () => {
    assert.equal(
      codeOf(() => new Tokenizer({ model: 'bert', tokens: ['a'] })),
      'TOKENIZER_UNSUPPORTED',
    );
    assert.equal(
      codeOf(() => new Tokenizer({ ...trainBpeVocab('qwen2'), pre: 'made-up' })),
      'TOKENIZER_UNSUPPORTED',
    );
  });

  it('rejects malformed metadata naming the key', () => {
    const spm = tinySpm();
    assert.equal(
      codeOf(() => new Tokenizer({ ...spm, scores: [1, 2] })),
      'TOKENIZER_METADATA',
    );
    assert.equal(
      codeOf(() => new Tokenizer({ ...spm, tokenTypes: spm.tokens.map(() => 9) })),
      'TOKENIZER_METADATA',
    );
    assert.equal(
      codeOf(() => new Tokenizer({ ...spm, bosTokenId: spm.tokens.length })),
      'TOKENIZER_METADATA',
    );
    assert.equal(
      codeOf(() => new Tokenizer({ model: 'llama', tokens: [] })),
      'TOKENIZER_METADATA',
    );
    const { merges: _m, ...noMerges } = trainBpeVocab('qwen2');
    assert.equal(
      codeOf(() => new Tokenizer(noMerges)),
      'TOKENIZER_METADATA',
    );
    assert.equal(
      codeOf(() => new Tokenizer({ ...trainBpeVocab('qwen2'), merges: ['nospace'] })),
      'TOKENIZER_METADATA',
    );
  });

  it('rejects bad token ids, a missing BOS and missing byte tokens', () => {
    const tok = new Tokenizer(tinySpm());
    assert.equal(
      codeOf(() => tok.decode([tok.vocabSize])),
      'TOKENIZER_TOKEN_ID',
    );
    assert.equal(
      codeOf(() => tok.decode([-1])),
      'TOKENIZER_TOKEN_ID',
    );
    assert.equal(
      codeOf(() => tok.streamDecoder().push(1.5)),
      'TOKENIZER_TOKEN_ID',
    );
    const { bosTokenId: _b, ...noBos } = trainBpeVocab('llama-bpe');
    assert.equal(
      codeOf(() => new Tokenizer(noBos).encode('a')),
      'TOKENIZER_NO_SPECIAL_TOKEN',
    );
    assert.equal(new Tokenizer(noBos).encode('a', { addBos: false }).length, 1);
    const noBytes: TokenizerMetadata = { model: 'llama', tokens: ['▁', 'a'], scores: [0, 0] };
    assert.deepEqual(new Tokenizer(noBytes).encode('a', { addBos: false }), [0, 1]);
    assert.equal(
      codeOf(() => new Tokenizer(noBytes).encode('é', { addBos: false })),
      'TOKENIZER_BYTE_FALLBACK',
    );
  });
});

describe('tokenizerMetadataFromGguf', () => {
  it('reads the tokenizer of a GGUF file written with the make-model vocabulary builder', () => {
    const vocab = buildBpeVocab(1024, 'qwen2');
    const file = GgufFile.fromBytes(vocabModelBytes(vocabMetadata(vocab), vocab.tokens.length));
    const meta = tokenizerMetadataFromGguf(file.metadata.entries);
    assert.equal(meta.model, 'gpt2');
    assert.equal(meta.pre, 'qwen2');
    assert.equal(meta.tokens.length, 1024);
    assert.equal(meta.eosTokenId, vocab.eos);
    assert.equal(meta.addBosToken, vocab.addBos);
    assert.equal(meta.chatTemplate, vocab.chatTemplate);
    const tok = new Tokenizer(meta);
    assert.equal(tok.decode(tok.encode('The harbor town woke slowly.')), 'The harbor town woke slowly.');
  });

  it('rejects missing keys and wrong types', () => {
    const base: [string, GgufValue][] = [
      ['tokenizer.ggml.model', gv.str('llama')],
      ['tokenizer.ggml.tokens', gv.strings(['a'])],
    ];
    const read = (...extra: [string, GgufValue][]): TokenizerMetadata =>
      tokenizerMetadataFromGguf(new Map([...base, ...extra]));
    assert.deepEqual(read().tokens, ['a']);
    assert.equal(
      codeOf(() => tokenizerMetadataFromGguf(new Map())),
      'TOKENIZER_METADATA',
    );
    assert.equal(
      codeOf(() => read(['tokenizer.ggml.scores', gv.strings(['x'])])),
      'TOKENIZER_METADATA',
    );
    assert.equal(
      codeOf(() => read(['tokenizer.ggml.bos_token_id', gv.str('1')])),
      'TOKENIZER_METADATA',
    );
    assert.equal(
      codeOf(() => read(['tokenizer.ggml.add_bos_token', gv.u32(1)])),
      'TOKENIZER_METADATA',
    );
    assert.equal(
      codeOf(() => read(['tokenizer.ggml.tokens', gv.i32s([1])])),
      'TOKENIZER_METADATA',
    );
  });
});
