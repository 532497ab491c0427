import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  BPE_SPECIAL_TOKENS,
  TokenType,
  buildBpeVocab,
  buildSpmVocab,
  bytesToUnicode,
  learnMerges,
} from './vocab.js';
import { ByteBuilder } from './byte-builder.js';

test('learnMerges joins the most frequent pair first, ties by text', () => {
  const merges = learnMerges(
    new Map([
      ['abab', 2],
      ['abc', 1],
    ]),
    10,
  );
  assert.deepEqual(merges[0], ['a', 'b']);
  assert.deepEqual(merges[1], ['ab', 'ab']);
  assert.deepEqual(merges[2], ['ab', 'c']);
  assert.equal(merges.length, 3);
});

for (const size of [1024, 4096, 32000]) {
  test(`SentencePiece vocabulary of ${size}: specials, 256 byte tokens, unique pieces reachable by merges`, () => {
    const v = buildSpmVocab(size);
    assert.equal(v.tokens.length, size);
    assert.equal(new Set(v.tokens).size, size, 'tokens must be unique (llama.cpp asserts it)');
    assert.deepEqual(v.tokens.slice(0, 3), ['<unk>', '<s>', '</s>']);
    assert.equal(v.tokens[3 + 0x0a], '<0x0A>');
    assert.equal(v.tokenTypes[3 + 0xff], TokenType.BYTE);
    assert.equal(v.scores!.length, size);
    assert.ok(v.tokens.includes('▁the') && v.tokens.includes('▁'));
    const set = new Set(v.tokens);
    // Every multi-character piece splits into two shorter pieces (how SentencePiece merges reach it).
    for (const t of v.tokens.slice(259)) {
      const chars = Array.from(t);
      if (chars.length < 2) continue;
      let reachable = false;
      for (let i = 1; i < chars.length && !reachable; i++)
        reachable = set.has(chars.slice(0, i).join('')) && set.has(chars.slice(i).join(''));
      assert.ok(reachable, `piece ${t} cannot be built from two pieces`);
    }
    // Scores fall with merge order, so earlier (more frequent) merges win.
    assert.ok((v.scores![259] as number) > (v.scores![300] as number));
  });
}

test('BPE vocabulary: byte alphabet first, merges that build every token, special tokens last', () => {
  const v = buildBpeVocab(4096);
  const b2u = bytesToUnicode();
  assert.equal(new Set(b2u).size, 256);
  assert.equal(b2u[0x20], 'Ġ');
  assert.equal(b2u[0x0a], 'Ċ');
  assert.deepEqual(v.tokens.slice(0, 256), b2u);
  assert.equal(v.tokens.length, 4096);
  assert.equal(new Set(v.tokens).size, 4096);
  assert.deepEqual(v.tokens.slice(-BPE_SPECIAL_TOKENS.length), BPE_SPECIAL_TOKENS);
  assert.equal(v.tokens[v.bos], '<|begin_of_text|>');
  assert.equal(v.tokenTypes[v.bos], TokenType.CONTROL);
  const known = new Set(v.tokens.slice(0, 256));
  for (const m of v.merges!) {
    const [a, b] = m.split(' ') as [string, string];
    assert.ok(known.has(a) && known.has(b), `merge ${m} uses an unknown token`);
    known.add(a + b);
  }
  assert.equal(known.size, 4096 - BPE_SPECIAL_TOKENS.length, 'each merge makes exactly one new token');
  assert.ok(v.tokens.includes('Ġthe'));
  const q = buildBpeVocab(2048, 'qwen2');
  assert.equal(q.pre, 'qwen2');
  assert.equal(q.addBos, false);
  assert.equal(q.tokens[q.eos], '<|im_end|>');
});

test('ByteBuilder grows across its initial capacity without losing bytes', () => {
  const b = new ByteBuilder();
  const chunk = Uint8Array.from({ length: 3000 }, (_, i) => i & 0xff);
  b.u32(7)
    .bytes(chunk)
    .str('x'.repeat(5000))
    .u64(2n ** 63n)
    .pad(32);
  const out = b.finish();
  assert.equal(out.length % 32, 0);
  const view = new DataView(out.buffer);
  assert.equal(view.getUint32(0, true), 7);
  assert.deepEqual(out.subarray(4, 3004), chunk);
  assert.equal(view.getBigUint64(3004, true), 5000n);
  assert.equal(view.getBigUint64(3012 + 5000, true), 2n ** 63n);
});

test('the chat templates render with @huggingface/jinja', async () => {
  const { Template } = await import('@huggingface/jinja');
  const messages = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Hi' },
    { role: 'assistant', content: 'Hello' },
  ];
  const spm = buildSpmVocab(1024);
  const spmText = new Template(spm.chatTemplate).render({
    messages,
    bos_token: '<s>',
    eos_token: '</s>',
    add_generation_prompt: true,
  });
  assert.equal(spmText, '<s><<SYS>>\nBe brief.\n<</SYS>>\n\n[INST] Hi [/INST] Hello</s>');
  const bpe = buildBpeVocab(1024);
  const bpeText = new Template(bpe.chatTemplate).render({
    messages: messages.slice(1, 2),
    add_generation_prompt: true,
  });
  assert.equal(bpeText, '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n');
});

test('buildSpmVocab makes a Llama 3-sized vocabulary (128,256 tokens) without overflowing the stack', () => {
  const v = buildSpmVocab(128256);
  assert.equal(v.tokens.length, 128256);
  assert.equal(new Set(v.tokens).size, 128256, 'every token distinct');
});
