import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ChatTemplate, type Tokenizer } from '../engine/index.js';
import { isTandemError } from '../errors/index.js';
import { chatPrompt, type ServedModel } from './served-model.js';
import { callsAsContent, parseToolChoice, parseTools, readToolCall, withToolsMessage } from './tools.js';

const tools = parseTools({
  tools: [
    { type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } },
    { type: 'function', function: { name: 'noop', description: 'does nothing' } },
  ],
});

const param = (f: () => unknown): unknown => {
  try {
    f();
  } catch (e) {
    if (isTandemError(e, 'API_BAD_REQUEST')) return e.details?.param;
    throw e;
  }
  return 'no error';
};

test('tools: parsed with their parameters; tool_choice defaults to auto with tools, none without', () => {
  assert.deepEqual(
    tools.map((t) => [t.name, t.description, t.parameters]),
    [
      ['get_weather', undefined, { type: 'object' }],
      ['noop', 'does nothing', {}],
    ],
  );
  assert.equal(parseToolChoice({}, tools), 'auto');
  assert.equal(parseToolChoice({}, []), 'none');
  assert.deepEqual(
    parseToolChoice({ tool_choice: { type: 'function', function: { name: 'noop' } } }, tools),
    {
      name: 'noop',
    },
  );
  assert.equal(
    param(() => parseTools({ tools: {} })),
    'tools',
  );
  assert.equal(
    param(() => parseTools({ tools: [{ type: 'function' }] })),
    'tools[0]',
  );
  assert.equal(
    param(() => parseTools({ tools: [{ type: 'function', function: { name: 'f', parameters: [] } }] })),
    'tools[0].function.parameters',
  );
  assert.equal(
    param(() => parseToolChoice({ tool_choice: 'always' }, tools)),
    'tool_choice',
  );
});

test('readToolCall: an answer that is one JSON object naming a tool is a call; anything else is text', () => {
  const call = readToolCall(' {"name": "get_weather", "arguments": {"city": "Oslo"}}\n', tools);
  assert.equal(call?.type, 'function');
  assert.equal(call?.function.name, 'get_weather');
  assert.equal(call?.function.arguments, '{"city":"Oslo"}');
  assert.match(call?.id ?? '', /^call_[0-9a-f]{24}$/);
  // llama-style "parameters" is read as the arguments
  assert.equal(readToolCall('{"name":"noop","parameters":{}}', tools)?.function.arguments, '{}');
  for (const text of [
    'Sunny in Oslo.',
    '{"name": "get_weather", "arguments": {"city": "Oslo"}} and more',
    '{"name": "unknown", "arguments": {}}',
    '{"name": "noop", "arguments": "{}"}',
    '{"name": "noop"}',
    '[{"name": "noop", "arguments": {}}]',
    '{"name": "noop", "arguments": {',
  ])
    assert.equal(readToolCall(text, tools), undefined, text);
});

test('withToolsMessage lists the tools in the first system message, or a new one; callsAsContent writes calls as the model does', () => {
  const own = withToolsMessage([{ role: 'user', content: 'hi' }], tools);
  assert.equal(own.length, 2);
  assert.equal(own[0]?.role, 'system');
  assert.match(own[0]?.content ?? '', /"name":"get_weather"/);
  assert.match(own[0]?.content ?? '', /"description":"does nothing"/);
  const merged = withToolsMessage(
    [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'hi' },
    ],
    tools,
  );
  assert.equal(merged.length, 2);
  assert.match(merged[0]?.content ?? '', /^Be brief\.\n\nYou can call these functions:/);
  assert.equal(
    callsAsContent(
      [
        { id: 'a', type: 'function', function: { name: 'noop', arguments: '{}' } },
        { id: 'b', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Oslo"}' } },
      ],
      'm',
    ),
    '{"name":"noop","arguments":{}}\n{"name":"get_weather","arguments":{"city":"Oslo"}}',
  );
  assert.equal(callsAsContent(undefined, 'm'), '');
  assert.equal(
    param(() => callsAsContent([{ function: { name: 'noop' } }], 'm')),
    'm[0]',
  );
});

test('chatPrompt gives the tools to a template that reads them, and in a system message to one that does not', () => {
  // a tokenizer of bytes: the prompt's ids read back as its text
  const bytes = {
    bosId: undefined,
    eosId: undefined,
    vocab: { addBos: false },
    tokenText: () => '',
    encode: (t: string) => [...Buffer.from(t)],
  } as unknown as Tokenizer;
  const prompt = (source: string): string =>
    Buffer.from(
      chatPrompt(
        { template: new ChatTemplate(source), tokenizer: bytes } as unknown as ServedModel,
        [{ role: 'user', content: 'hi' }],
        tools,
      ),
    ).toString();
  const turns = '{% for m in messages %}{{ m.role }}:{{ m.content }}|{% endfor %}';
  assert.equal(
    prompt(`{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}{% endif %}${turns}`),
    'TOOLS:get_weather;noop;user:hi|',
  );
  assert.match(prompt(turns), /^system:You can call these functions:\n\{"name":"get_weather".*\|user:hi\|$/s);
});
