import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../errors/index.js';
import { parseChatRequest, parseCompletionRequest } from './openai-types.js';

const messages = [{ role: 'user', content: 'Hi' }];

function paramOf(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    assert.ok(isTandemError(error, 'API_BAD_REQUEST'), String(error));
    return error.details.param;
  }
  assert.fail('expected a 400');
}

test('chat requests: defaults, both token-limit fields, content parts, unknown fields ignored', () => {
  const r = parseChatRequest({
    messages,
    user: 'u1',
    tools_whatever: 3,
    max_completion_tokens: 7,
    stop: 'x',
    stream_options: { include_usage: true },
  });
  assert.equal(r.maxTokens, 7);
  assert.deepEqual(r.stop, ['x']);
  assert.equal(r.temperature, 1);
  assert.equal(r.topP, 1);
  assert.equal(r.includeUsage, true);
  assert.equal(r.logprobs, undefined);
  assert.equal(parseChatRequest({ messages, max_tokens: 5 }).maxTokens, 5);
  assert.equal(parseChatRequest({ messages, logprobs: true }).logprobs, 0);
  assert.equal(parseChatRequest({ messages, logprobs: true, top_logprobs: 20 }).logprobs, 20);
  assert.equal(parseChatRequest({ messages, temperature: null, seed: -1 }).seed, 2 ** 32 - 1);
  const parts = parseChatRequest({
    messages: [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'a' },
          { type: 'text', text: 'b' },
        ],
      },
    ],
  });
  assert.deepEqual(parts.messages, [{ role: 'user', content: 'ab' }]);
});

test('wrong types and values are 400s that name the field', () => {
  assert.equal(
    paramOf(() => parseChatRequest({ messages, temperature: 'hot' })),
    'temperature',
  );
  assert.equal(
    paramOf(() => parseChatRequest({ messages, temperature: 3 })),
    'temperature',
  );
  assert.equal(
    paramOf(() => parseChatRequest({ messages, max_tokens: 1.5 })),
    'max_tokens',
  );
  assert.equal(
    paramOf(() => parseChatRequest({ messages, max_tokens: 0 })),
    'max_tokens',
  );
  assert.equal(
    paramOf(() => parseChatRequest({ messages, n: 2 })),
    'n',
  );
  assert.equal(
    paramOf(() => parseChatRequest({ messages, stop: ['a', 'b', 'c', 'd', 'e'] })),
    'stop',
  );
  assert.equal(
    paramOf(() => parseChatRequest({ messages, stop: [1] })),
    'stop',
  );
  assert.equal(
    paramOf(() => parseChatRequest({ messages, top_logprobs: 3 })),
    'top_logprobs',
  );
  assert.equal(
    paramOf(() => parseChatRequest({ messages, logprobs: true, top_logprobs: 21 })),
    'top_logprobs',
  );
  assert.equal(
    paramOf(() => parseChatRequest({ messages, stream: 'yes' })),
    'stream',
  );
  assert.equal(
    paramOf(() => parseChatRequest({ messages, stream_options: { include_usage: 1 } })),
    'stream_options.include_usage',
  );
  assert.equal(
    paramOf(() => parseChatRequest({ messages, presence_penalty: -2.5 })),
    'presence_penalty',
  );
  assert.equal(
    paramOf(() => parseCompletionRequest({ prompt: 'a', echo: true, logprobs: 1 })),
    'echo',
  );
  assert.equal(
    paramOf(() => parseCompletionRequest({ prompt: 'a', best_of: 2 })),
    'best_of',
  );
  assert.equal(
    paramOf(() => parseCompletionRequest({ prompt: 'a', suffix: 'b' })),
    'suffix',
  );
  assert.equal(parseCompletionRequest({ prompt: 'a', echo: true, best_of: 1, suffix: '' }).echo, true);
  for (const logit_bias of [[1], 'x', { a: 1 }, { '01': 1 }, { '-1': 1 }, { 5: 101 }, { 5: '1' }])
    assert.equal(
      paramOf(() => parseChatRequest({ messages, logit_bias })),
      'logit_bias',
      JSON.stringify(logit_bias),
    );
  assert.deepEqual(
    [...parseChatRequest({ messages, logit_bias: { 5: -100, 12: 2.5 } }).logitBias],
    [
      [5, -100],
      [12, 2.5],
    ],
  );
  for (const [response_format, param] of [
    ['json', 'response_format'],
    [{ type: 'xml' }, 'response_format.type'],
    [{ type: 'json_schema' }, 'response_format.json_schema'],
    [
      { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: 'a+' } } },
      'response_format.json_schema.schema',
    ],
  ] as const)
    assert.equal(
      paramOf(() => parseChatRequest({ messages, response_format })),
      param,
      JSON.stringify(response_format),
    );
  assert.equal(parseChatRequest({ messages, response_format: { type: 'text' } }).responseFormat, undefined);
  assert.equal(
    parseChatRequest({ messages, response_format: { type: 'json_object' } }).responseFormat?.kind,
    'object',
  );
  assert.equal(
    paramOf(() => parseChatRequest({ messages: [] })),
    'messages',
  );
  assert.equal(
    paramOf(() => parseChatRequest({ messages: [{ role: 'user', content: 5 }] })),
    'messages[0].content',
  );
  assert.equal(
    paramOf(() => parseChatRequest({ messages: [{ content: 'x' }] })),
    'messages[0].role',
  );
  assert.equal(
    paramOf(() => parseChatRequest({ messages: [{ role: 'user', content: [{ type: 'image_url' }] }] })),
    'messages[0].content[0]',
  );
  assert.equal(
    paramOf(() => parseChatRequest([messages])),
    null,
  );
});

test('completion requests: text, one-string lists and token ids; logprobs is a count', () => {
  assert.equal(parseCompletionRequest({ prompt: 'Hello' }).prompt, 'Hello');
  assert.equal(parseCompletionRequest({ prompt: ['Hello'] }).prompt, 'Hello');
  assert.deepEqual(parseCompletionRequest({ prompt: [1, 2, 3], logprobs: 2 }).prompt, [1, 2, 3]);
  assert.equal(parseCompletionRequest({ prompt: 'x', logprobs: 2 }).logprobs, 2);
  assert.equal(
    paramOf(() => parseCompletionRequest({ prompt: ['a', 'b'] })),
    'prompt',
  );
  assert.equal(
    paramOf(() => parseCompletionRequest({ prompt: [1, -2] })),
    'prompt',
  );
  assert.equal(
    paramOf(() => parseCompletionRequest({})),
    'prompt',
  );
  assert.equal(
    paramOf(() => parseCompletionRequest({ prompt: 'x', logprobs: 6 })),
    'logprobs',
  );
  // the chat route's name for the limit is not the legacy route's: ignored there
  assert.equal(parseCompletionRequest({ prompt: 'x', max_completion_tokens: 3 }).maxTokens, undefined);
});
