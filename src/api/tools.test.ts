import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ChatTemplate, type Tokenizer } from '../engine/index.js';
import { isTandemError } from '../errors/index.js';
import { chatPrompt, type ServedModel } from './served-model.js';
import {
  CallStreamer,
  type CallDelta,
  callProgress,
  callsAsText,
  historyCalls,
  mayBeCalls,
  parseToolChoice,
  parseTools,
  readToolCalls,
  withToolsMessage,
} from './tools.js';

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

test('readToolCalls: an answer that consists of calls, in the forms models write them, is calls; anything else is text', () => {
  const one = readToolCalls(' {"name": "get_weather", "arguments": {"city": "Oslo"}}\n', tools);
  assert.equal(one?.length, 1);
  assert.equal(one?.[0]?.type, 'function');
  assert.equal(one?.[0]?.function.name, 'get_weather');
  assert.equal(one?.[0]?.function.arguments, '{"city":"Oslo"}');
  assert.match(one?.[0]?.id ?? '', /^call_[0-9a-f]{24}$/);
  const names = (text: string): string[] | undefined =>
    readToolCalls(text, tools)?.map((c) => `${c.function.name} ${c.function.arguments}`);
  // Llama 3.1's "parameters"; Mistral's array, with or without its mark; Hermes/Qwen blocks
  assert.deepEqual(names('{"name":"noop","parameters":{}}'), ['noop {}']);
  assert.deepEqual(
    names('[TOOL_CALLS] [{"name":"noop","arguments":{}},{"name":"get_weather","arguments":{"d":1}}]'),
    ['noop {}', 'get_weather {"d":1}'],
  );
  assert.deepEqual(names('[{"name":"noop","arguments":{}}]'), ['noop {}']);
  assert.deepEqual(
    names(
      '<tool_call>\n{"name": "noop", "arguments": {}}\n</tool_call>\n<tool_call>{"name": "get_weather", "arguments": {"c": "x"}}</tool_call>',
    ),
    ['noop {}', 'get_weather {"c":"x"}'],
  );
  for (const text of [
    'Sunny in Oslo.',
    '{"name": "get_weather", "arguments": {"city": "Oslo"}} and more',
    '{"name": "unknown", "arguments": {}}',
    '{"name": "noop", "arguments": "{}"}',
    '{"name": "noop"}',
    '[]',
    '[{"name": "noop", "arguments": {}}, {"name": "unknown", "arguments": {}}]',
    '{"name": "noop", "arguments": {',
    '<tool_call>{"name": "noop", "arguments": {}}',
    '<tool_call>{"name": "noop", "arguments": {}}</tool_call> and text',
  ])
    assert.equal(readToolCalls(text, tools), undefined, text);
  // while streaming: what may still become calls is held back
  for (const text of ['', '  ', '{"na', '[', '<tool', '<tool_call>{', '[TOOL_CALLS] ['])
    assert.ok(mayBeCalls(text), text);
  for (const text of ['Sun', ' <b>', '<toolbox']) assert.ok(!mayBeCalls(text), text);
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
  const calls = historyCalls(
    [
      { id: 'a', type: 'function', function: { name: 'noop', arguments: '{}' } },
      { id: 'b', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Oslo"}' } },
    ],
    'm',
  );
  assert.deepEqual(calls, [
    { type: 'function', function: { name: 'noop', arguments: {} } },
    { type: 'function', function: { name: 'get_weather', arguments: { city: 'Oslo' } } },
  ]);
  assert.equal(historyCalls(undefined, 'm'), undefined);
  assert.equal(
    param(() => historyCalls([{ function: { name: 'noop' } }], 'm')),
    'm[0]',
  );
  assert.equal(
    param(() => historyCalls([{ function: { name: 'noop', arguments: '[1]' } }], 'm')),
    'm[0].function.arguments',
  );
  assert.deepEqual(
    callsAsText([
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'Let me look.', ...(calls ? { tool_calls: calls } : {}) },
      { role: 'tool', content: 'sunny', tool_call_id: 'b' },
    ]),
    [
      { role: 'user', content: 'hi' },
      {
        role: 'assistant',
        content:
          'Let me look.\n{"name":"noop","arguments":{}}\n{"name":"get_weather","arguments":{"city":"Oslo"}}',
      },
      { role: 'tool', content: 'sunny', tool_call_id: 'b' },
    ],
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
  // the history's calls: to a template that reads tool_calls as they are, else in the content
  const history = (source: string): string =>
    Buffer.from(
      chatPrompt({ template: new ChatTemplate(source), tokenizer: bytes } as unknown as ServedModel, [
        {
          role: 'assistant',
          content: '',
          tool_calls: [{ type: 'function', function: { name: 'noop', arguments: { a: 1 } } }],
        },
      ]),
    ).toString();
  assert.equal(
    history(
      '{% for m in messages %}{% for c in m.tool_calls %}CALL {{ c.function.name }} {{ c.function.arguments.a }}{% endfor %}{% endfor %}',
    ),
    'CALL noop 1',
  );
  assert.equal(history(turns), 'assistant:{"name":"noop","arguments":{"a":1}}|');
});

test('callProgress: a call object read as far as it has come, strings and nesting skipped whole', () => {
  const text = '{ "name" : "get_weather", "arguments": {"city": "P}a\\"r{", "n": [1, {"x": 2}]} }';
  const whole = callProgress(text);
  const start = text.indexOf('{"city"');
  const argsEnd = text.lastIndexOf('}', text.length - 2) + 1;
  assert.deepEqual(whole, { name: 'get_weather', argsStart: start, argsEnd, end: text.length });
  assert.deepEqual(JSON.parse(text.slice(start, argsEnd)), { city: 'P}a"r{', n: [1, { x: 2 }] });
  // every prefix gives the name only once its string is whole, the ends only once they are there
  for (let k = 0; k <= text.length; k++) {
    const p = callProgress(text.slice(0, k));
    assert.equal(p.name === undefined, k < text.indexOf('"get_weather"') + 13, `name at ${k}`);
    assert.equal(p.argsStart === undefined, k <= start, `start at ${k}`);
    assert.equal(p.argsEnd === undefined, k < argsEnd, `args end at ${k}`);
    assert.equal(p.end === undefined, k < text.length, `end at ${k}`);
  }
  // arguments first, Llama's "parameters", other keys skipped, a start offset, and text that is no call object
  assert.deepEqual(callProgress('{"arguments": {"a": 1}, "id": 7, "name": "f"}'), {
    name: 'f',
    argsStart: 14,
    argsEnd: 22,
    end: 45,
  });
  assert.deepEqual(callProgress('xx{"name":"f","parameters":[]}', 2), {
    name: 'f',
    argsStart: 27,
    argsEnd: 29,
    end: 30,
  });
  assert.deepEqual(callProgress('Sure! {"name": "f"'), {});
  assert.deepEqual(callProgress('{"name": 5, "x'), {});
});

/** Feeds `text` to a streamer a character at a time; the calls as a client joins them. */
function streamed(
  text: string,
  names = ['get_weather', 'noop'],
): {
  s: CallStreamer;
  deltas: CallDelta[];
  calls: { id: string; name: string; args: string; pieces: number }[];
} {
  const s = new CallStreamer(new Set(names));
  const deltas: CallDelta[] = [];
  for (const ch of text) deltas.push(...s.push(ch));
  const calls: { id: string; name: string; args: string; pieces: number }[] = [];
  for (const d of deltas) {
    if (d.id !== undefined) {
      assert.equal(d.index, calls.length, 'calls start in order');
      assert.deepEqual(d.function.arguments, '');
      calls.push({ id: d.id, name: d.function.name ?? '', args: '', pieces: 0 });
    } else {
      const c = calls[d.index];
      assert.ok(c && d.function.name === undefined, JSON.stringify(d));
      c.args += d.function.arguments;
      c.pieces++;
    }
  }
  return { s, deltas, calls };
}

test('CallStreamer: each call its id and name first, then its arguments as they come, joined exactly', () => {
  const one = streamed('{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}');
  assert.ok(one.s.started);
  assert.equal(one.calls.length, 1);
  assert.match(one.calls[0]?.id ?? '', /^call_[0-9a-f]{24}$/);
  assert.equal(one.calls[0]?.name, 'get_weather');
  assert.equal(one.calls[0]?.args, '{"city": "Paris", "days": 2}');
  assert.ok((one.calls[0]?.pieces ?? 0) > 10, 'one delta a character here');
  // Hermes blocks and a Mistral array: several calls, each after the one before is whole
  const hermes = streamed(
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n<tool_call>{"arguments":{},"name":"noop"}</tool_call>',
  );
  assert.deepEqual(
    hermes.calls.map((c) => [c.name, c.args]),
    [
      ['get_weather', '{"city": "Oslo"}'],
      ['noop', '{}'],
    ],
  );
  assert.notEqual(hermes.calls[0]?.id, hermes.calls[1]?.id);
  const array = streamed(
    '[TOOL_CALLS] [{"name": "noop", "arguments": {}}, {"name": "get_weather", "parameters": {"a": [1, 2]}}]',
  );
  assert.deepEqual(
    array.calls.map((c) => [c.name, c.args]),
    [
      ['noop', '{}'],
      ['get_weather', '{"a": [1, 2]}'],
    ],
  );
  // arguments before the name: nothing until the name is whole, then all of them at once
  const late = new CallStreamer(new Set(['noop']));
  assert.deepEqual(late.push('{"arguments": {"a": 1}, "name": "'), []);
  assert.equal(late.started, false);
  const out = late.push('noop"}');
  assert.equal(out.length, 2);
  assert.equal(out[1]?.function.arguments, '{"a": 1}');
  // a name that is no offered tool, and text, start nothing
  assert.equal(streamed('{"name": "other", "arguments": {"a": 1}}').s.started, false);
  assert.equal(streamed('Sure, {"name": "noop", "arguments": {}}').s.started, false);
  assert.equal(
    streamed('{"name": "noop", "arguments": "{}"}').s.started,
    false,
    'arguments that are no object',
  );
  // a second call with an unknown name: the first is sent, the second is not
  assert.deepEqual(
    streamed('[{"name": "noop", "arguments": {}}, {"name": "x", "arguments": {}}]').calls.map((c) => c.name),
    ['noop'],
  );
});
