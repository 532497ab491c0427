import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isTandemError } from '../../errors/index.js';
import { trainBpeVocab, trainSpmVocab } from '../tokenizer/test-support/train-vocab.js';
import { Tokenizer } from '../tokenizer/index.js';
import { ChatTemplate, type ChatMessage } from './chat-template.js';

// Templates in the style models ship (written for this test).
const QWEN_STYLE =
  "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}" +
  "{{ '<|im_start|>system\\nYou are helpful.<|im_end|>\\n' }}{% endif %}" +
  "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const LLAMA3_STYLE =
  "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

const STRICT_ROLES =
  "{% for m in messages %}{% if m['role'] not in ['user', 'assistant'] %}{{ raise_exception('role ' + m['role'] + ' is not supported') }}{% endif %}{{ m['content'] }}{% endfor %}";

const MESSAGES: ChatMessage[] = [
  { role: 'user', content: 'Hi there' },
  { role: 'assistant', content: 'Hello!' },
  { role: 'user', content: 'How are you?' },
];

const codeOf = (fn: () => unknown): string => {
  try {
    fn();
  } catch (e) {
    if (isTandemError(e)) return e.code;
    throw e;
  }
  return 'no error';
};

describe('ChatTemplate', () => {
  it('renders a ChatML-style template with a generation prompt', () => {
    const out = new ChatTemplate(QWEN_STYLE).render(MESSAGES.slice(0, 1));
    assert.equal(
      out,
      '<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n',
    );
    const noPrompt = new ChatTemplate(QWEN_STYLE).render(MESSAGES.slice(0, 1), {
      addGenerationPrompt: false,
    });
    assert.ok(noPrompt.endsWith('Hi there<|im_end|>\n'));
  });

  it('passes bos_token, eos_token and extra variables', () => {
    const out = new ChatTemplate(LLAMA3_STYLE).render([{ role: 'user', content: ' Hi ' }], {
      bosToken: '<|begin_of_text|>',
    });
    assert.equal(
      out,
      '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
    );
    const vars = new ChatTemplate('{{ eos_token }}{% if think %}T{% endif %}').render(MESSAGES, {
      eosToken: '</s>',
      variables: { think: true },
    });
    assert.equal(vars, '</s>T');
  });

  it('reports parse errors, raise_exception and bad messages with typed errors', () => {
    assert.equal(
      codeOf(() => new ChatTemplate('{% for %}')),
      'CHAT_TEMPLATE_FAILED',
    );
    const strict = new ChatTemplate(STRICT_ROLES);
    assert.equal(strict.render(MESSAGES), 'Hi thereHello!How are you?');
    try {
      strict.render([{ role: 'system', content: 'x' }]);
      assert.fail('expected an error');
    } catch (e) {
      assert.ok(isTandemError(e, 'CHAT_TEMPLATE_FAILED'));
      assert.match(e.message, /role system is not supported/);
    }
    assert.equal(
      codeOf(() => strict.render([])),
      'CHAT_MESSAGES',
    );
    assert.equal(
      codeOf(() => strict.render([{ role: 'user' } as ChatMessage])),
      'CHAT_MESSAGES',
    );
  });

  it('needs the model template unless a fallback is asked for', () => {
    assert.equal(
      codeOf(() => ChatTemplate.fromModel(undefined)),
      'CHAT_TEMPLATE_MISSING',
    );
    assert.equal(
      codeOf(() => ChatTemplate.fromModel('  ')),
      'CHAT_TEMPLATE_MISSING',
    );
    const chatml = ChatTemplate.fromModel(undefined, { fallback: 'chatml' });
    assert.equal(
      chatml.render([{ role: 'user', content: 'x' }]),
      '<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n',
    );
    assert.equal(ChatTemplate.fromModel(QWEN_STYLE, { fallback: 'chatml' }).source, QWEN_STYLE);
  });

  it('encodes with special tokens parsed and exactly one BOS', () => {
    const llama3 = new Tokenizer(trainBpeVocab('llama-bpe'));
    const ids = new ChatTemplate(LLAMA3_STYLE).encode(llama3, MESSAGES);
    assert.equal(ids[0], llama3.bosId);
    assert.notEqual(ids[1], llama3.bosId);
    const eot = llama3.encode('<|eot_id|>', { addBos: false, parseSpecial: true });
    assert.equal(ids.filter((id) => id === eot[0]).length, 3);
    assert.equal(
      llama3.decode(ids, { special: true }),
      new ChatTemplate(LLAMA3_STYLE).render(MESSAGES, { bosToken: '<|begin_of_text|>' }),
    );

    const spm = new Tokenizer(trainSpmVocab());
    const chatml = ChatTemplate.fromModel(undefined, { fallback: 'chatml' });
    const spmIds = chatml.encode(spm, MESSAGES.slice(0, 1));
    assert.equal(spmIds[0], spm.bosId);
    assert.equal(spmIds[1], spm.encode('<|im_start|>', { addBos: false, parseSpecial: true })[0]);

    const qwen = new Tokenizer(trainBpeVocab('qwen2'));
    const qwenIds = new ChatTemplate(QWEN_STYLE).encode(qwen, MESSAGES.slice(0, 1));
    assert.equal(
      qwen.decode(qwenIds, { special: true }),
      new ChatTemplate(QWEN_STYLE).render(MESSAGES.slice(0, 1)),
    );
  });
});
