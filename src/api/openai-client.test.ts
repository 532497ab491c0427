import { after, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';
import { tempModel } from '../engine/testing/temp-model.js';
import { GEMM_TOKENS } from '../kernels/index.js';
import type { ApiServer } from './http-server.js';
import { metric, startTestServer, until } from './testing.js';

/*
 * The official `openai` client against an in-process server on a generated model: what a
 * user's script sees. A step hook slows decoding down when a test needs to act mid-stream.
 */

const path = tempModel('tandem-serve-client-', { arch: 'qwen2', shape: 'tiny', type: 'q8_0', seed: 3 });
const messages = [{ role: 'user' as const, content: 'Tell me a story.' }];
let slowMs = 0;
let server: ApiServer;
let client: OpenAI;

// made in the first test: the generated model exists only once the tests run (tempModel)
async function setUp(): Promise<void> {
  if (client) return;
  server = await startTestServer(path(), {
    name: 'tiny',
    apiKey: 'k1',
    stepHook: async () => {
      if (slowMs > 0) await sleep(slowMs);
    },
  });
  await server.ready;
  client = new OpenAI({ apiKey: 'k1', baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 20_000 });
}
beforeEach(setUp);
after(() => server?.close(0));

test('openai client: a chat completion, and the same tokens streamed with usage', async () => {
  const models = await client.models.list();
  assert.deepEqual(
    models.data.map((m) => m.id),
    ['tiny'],
  );
  const r = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 12, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0]?.message.role, 'assistant');
  assert.equal(r.choices[0]?.finish_reason, 'length');
  assert.ok((r.choices[0]?.message.content ?? '').length > 0);
  assert.equal(r.usage?.completion_tokens, 12);
  assert.equal(r.usage?.total_tokens, (r.usage?.prompt_tokens ?? 0) + 12);

  const stream = await client.chat.completions.create({
    model: 'tiny',
    messages,
    max_tokens: 12,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage: OpenAI.CompletionUsage | null | undefined;
  let finish: string | null | undefined;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
    usage = chunk.usage ?? usage;
  }
  assert.equal(text, r.choices[0]?.message.content);
  assert.equal(finish, 'length');
  // the same prompt again: the slot held it, so all but its last GEMM_TOKENS come from the cache
  const prompt = r.usage?.prompt_tokens ?? 0;
  assert.deepEqual(usage, {
    ...r.usage,
    prompt_tokens_details: { cached_tokens: Math.max(0, prompt - GEMM_TOKENS) },
  });

  const legacy = await client.completions.create({
    model: 'tiny',
    prompt: 'Once upon a time',
    max_tokens: 5,
    temperature: 0,
  });
  assert.equal(legacy.object, 'text_completion');
  assert.equal(legacy.usage?.completion_tokens, 5);
});

test('openai client: stop strings end the text before them, with finish_reason stop', async () => {
  const full = await client.chat.completions.create({
    model: 'tiny',
    messages,
    max_tokens: 16,
    temperature: 0,
  });
  const text = full.choices[0]?.message.content ?? '';
  // a stop string from the middle of the greedy text: its first occurrence ends the answer
  const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 3);
  assert.equal(stop.length, 3);
  const cut = await client.chat.completions.create({
    model: 'tiny',
    messages,
    max_tokens: 16,
    temperature: 0,
    stop: [stop, 'never-seen'],
  });
  assert.equal(cut.choices[0]?.finish_reason, 'stop');
  assert.equal(cut.choices[0]?.message.content, text.slice(0, text.indexOf(stop)));
  assert.ok((cut.usage?.completion_tokens ?? 0) < 16);
  const stream = await client.chat.completions.create({
    model: 'tiny',
    messages,
    max_tokens: 16,
    temperature: 0,
    stop,
    stream: true,
  });
  let streamed = '';
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta.content ?? '';
  assert.equal(streamed, cut.choices[0]?.message.content);
});

test('openai client: logprobs with top_logprobs, greedy picks the most likely token', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny',
    messages,
    max_tokens: 6,
    temperature: 0,
    logprobs: true,
    top_logprobs: 3,
  });
  const content = r.choices[0]?.logprobs?.content ?? [];
  assert.equal(content.length, 6);
  assert.equal(content.map((c) => c.token).join(''), r.choices[0]?.message.content);
  for (const c of content) {
    assert.equal(c.top_logprobs.length, 3);
    assert.ok(c.logprob < 0);
    assert.equal(c.top_logprobs[0]?.token, c.token);
    assert.equal(c.top_logprobs[0]?.logprob, c.logprob);
    assert.ok(
      c.top_logprobs[0]!.logprob >= c.top_logprobs[1]!.logprob &&
        c.top_logprobs[1]!.logprob >= c.top_logprobs[2]!.logprob,
    );
    assert.deepEqual(Buffer.from(c.bytes ?? []).toString('utf8'), c.token);
  }
  const none = await client.chat.completions.create({
    model: 'tiny',
    messages,
    max_tokens: 2,
    temperature: 0,
  });
  assert.equal(none.choices[0]?.logprobs, null);
});

test('openai client: a seed fixes the sampled text; penalties change a greedy text that repeats', async () => {
  const ask = (o: {
    seed?: number;
    temperature?: number;
    frequency_penalty?: number;
    presence_penalty?: number;
  }) =>
    client.chat.completions
      .create({ model: 'tiny', messages, max_tokens: 24, ...o })
      .then((r) => r.choices[0]?.message.content ?? '');
  const a = await ask({ seed: 7, temperature: 1 });
  assert.equal(await ask({ seed: 7, temperature: 1 }), a);
  assert.notEqual(await ask({ seed: 8, temperature: 1 }), a);
  // this random-weight model repeats itself when greedy; a frequency penalty breaks the repeats
  const words = (text: string): number => new Set(text.split(' ')).size;
  const greedy = await ask({ temperature: 0 });
  const penalised = await ask({ temperature: 0, frequency_penalty: 2 });
  assert.notEqual(penalised, greedy);
  assert.ok(words(penalised) > words(greedy), `${words(penalised)} distinct words against ${words(greedy)}`);
  assert.notEqual(await ask({ temperature: 0, presence_penalty: 2 }), greedy);
});

test('openai client: logit_bias forces a token in greedy completions and chat streams; a token past the vocabulary is a 400 naming it', async () => {
  const complete = (logit_bias: Record<string, number>): Promise<string> =>
    client.completions
      .create({ model: 'tiny', prompt: [1, 2, 3], max_tokens: 5, temperature: 0, logit_bias })
      .then((r) => r.choices[0]?.text ?? '');
  const detokenize = async (tokens: number[]): Promise<string> =>
    (
      (await (
        await fetch(`${server.url}/detokenize`, {
          method: 'POST',
          headers: { 'x-api-key': 'k1', 'content-type': 'application/json' },
          body: JSON.stringify({ tokens }),
        })
      ).json()) as { content: string }
    ).content;
  const forced = await detokenize([40, 40, 40, 40, 40]);
  assert.ok(forced.length >= 5, `token 40 renders as text (${JSON.stringify(forced)})`);
  assert.equal(await complete({ 40: 100 }), forced);
  assert.notEqual(await complete({}), forced, 'the unbiased greedy text differs');
  // the same bias through the chat route, streamed: every token the forced one
  const stream = await client.chat.completions.create({
    model: 'tiny',
    messages,
    max_tokens: 3,
    temperature: 0,
    logit_bias: { 40: 100 },
    stream: true,
  });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
  assert.equal(text, await detokenize([40, 40, 40]));
  await assert.rejects(
    complete({ 999999: 5 }),
    (e: unknown) =>
      e instanceof OpenAI.BadRequestError && /logit_bias/.test(e.message) && /vocabulary/.test(e.message),
  );
});

test("openai client: tool_choice required and named give a tool call of the tool's parameters, streamed or not; bad tools are 400s", async () => {
  const tools = [
    {
      type: 'function' as const,
      function: {
        name: 'get_weather',
        description: 'The weather in a city',
        parameters: {
          type: 'object',
          properties: { city: { type: 'string', maxLength: 8 }, days: { enum: [1, 2, 3] } },
          required: ['city', 'days'],
          additionalProperties: false,
        },
      },
    },
    {
      type: 'function' as const,
      function: {
        name: 'set_alarm',
        parameters: {
          type: 'object',
          properties: { hour: { enum: [6, 7, 8] } },
          required: ['hour'],
          additionalProperties: false,
        },
      },
    },
  ];
  const fits = (name: string, args: Record<string, unknown>): boolean =>
    name === 'get_weather'
      ? Object.keys(args).join() === 'city,days' &&
        typeof args.city === 'string' &&
        [...args.city].length <= 8 &&
        [1, 2, 3].includes(args.days as number)
      : Object.keys(args).join() === 'hour' && [6, 7, 8].includes(args.hour as number);
  for (const temperature of [0, 1]) {
    const r = await client.chat.completions.create({
      model: 'tiny',
      messages,
      max_tokens: 100,
      temperature,
      seed: 5,
      tools,
      tool_choice: 'required',
    });
    const choice = r.choices[0];
    assert.equal(choice?.finish_reason, 'tool_calls', JSON.stringify(choice));
    assert.equal(choice?.message.content, null);
    const call = choice?.message.tool_calls?.[0];
    assert.ok(call && call.type === 'function' && /^call_[0-9a-f]{24}$/.test(call.id), JSON.stringify(call));
    const args = JSON.parse(call.function.arguments) as Record<string, unknown>;
    assert.ok(fits(call.function.name, args), JSON.stringify(call));
  }
  // named (each of the two, so the name is not the one the model would pick anyway), streamed:
  // the first delta names the call, the arguments follow as they are generated, then
  // finish_reason tool_calls
  for (const name of ['get_weather', 'set_alarm']) {
    const stream = await client.chat.completions.create({
      model: 'tiny',
      messages,
      max_tokens: 100,
      temperature: 0,
      tools,
      tool_choice: { type: 'function', function: { name } },
      stream: true,
    });
    let content = '';
    const calls: { id?: string; name?: string; args: string }[] = [];
    let finish: string | null | undefined;
    let argDeltas = 0;
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      content += c?.delta.content ?? '';
      for (const t of c?.delta.tool_calls ?? []) {
        if (calls[t.index] === undefined)
          assert.ok(t.id && t.type === 'function' && t.function?.name === name, JSON.stringify(t));
        if (t.function?.arguments) argDeltas++;
        const at = (calls[t.index] ??= { args: '' });
        if (t.id !== undefined) at.id ??= t.id;
        if (t.function?.name !== undefined) at.name ??= t.function.name;
        at.args += t.function?.arguments ?? '';
      }
      finish = c?.finish_reason ?? finish;
    }
    assert.equal(content, '', 'a call sends no content');
    assert.equal(finish, 'tool_calls');
    assert.equal(calls.length, 1);
    assert.equal(calls[0]?.name, name);
    assert.ok(fits(name, JSON.parse(calls[0]?.args ?? '') as Record<string, unknown>), calls[0]?.args);
    assert.ok(argDeltas > 1, `the arguments came in ${argDeltas} delta(s)`);
  }
  // "auto": text unless the answer is a call; streamed, text that may still be one (a JSON
  // object so far) is held back, then sent as it came
  const auto = {
    model: 'tiny',
    messages,
    max_tokens: 30,
    temperature: 0,
    tools,
    response_format: { type: 'json_object' as const },
  };
  const whole = await client.chat.completions.create(auto);
  const text = whole.choices[0]?.message.content ?? '';
  assert.match(text, /^\s*\{/);
  assert.equal(whole.choices[0]?.message.tool_calls, undefined);
  let streamed = '';
  for await (const chunk of await client.chat.completions.create({ ...auto, stream: true }))
    streamed += chunk.choices[0]?.delta.content ?? '';
  assert.equal(streamed, text);
  // "auto" with an answer that is a call (held to the call's shape here by response_format, as
  // a model that knows the tools would write it): a tool call, and streamed, sent as it comes
  const callFormat = {
    type: 'json_schema' as const,
    json_schema: {
      name: 'call',
      schema: {
        type: 'object',
        properties: { name: { const: 'set_alarm' }, arguments: tools[1]?.function.parameters },
        required: ['name', 'arguments'],
        additionalProperties: false,
      },
    },
  };
  const autoCall = { ...auto, max_tokens: 60, response_format: callFormat };
  const called = await client.chat.completions.create(autoCall);
  const call = called.choices[0]?.message.tool_calls?.[0];
  assert.equal(called.choices[0]?.finish_reason, 'tool_calls', JSON.stringify(called.choices[0]));
  assert.ok(call?.type === 'function' && call.function.name === 'set_alarm', JSON.stringify(call));
  const got = { content: '', name: '', args: '', pieces: 0, finish: '' };
  for await (const chunk of await client.chat.completions.create({ ...autoCall, stream: true })) {
    const c = chunk.choices[0];
    got.content += c?.delta.content ?? '';
    for (const t of c?.delta.tool_calls ?? []) {
      got.name += t.function?.name ?? '';
      if (t.function?.arguments) got.pieces++;
      got.args += t.function?.arguments ?? '';
    }
    got.finish = c?.finish_reason ?? got.finish;
  }
  assert.deepEqual(
    [got.content, got.name, JSON.parse(got.args), got.finish],
    ['', 'set_alarm', JSON.parse(call.function.arguments), 'tool_calls'],
  );
  assert.ok(got.pieces > 1, `the arguments came in ${got.pieces} delta(s)`);
  // a history with a call and its result is taken (rendered as the model writes calls)
  const next = await client.chat.completions.create({
    model: 'tiny',
    max_tokens: 4,
    temperature: 0,
    tools,
    tool_choice: 'none',
    messages: [
      ...messages,
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'set_alarm', arguments: '{"hour":7}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: 'alarm set' },
    ],
  });
  assert.equal(next.choices[0]?.finish_reason, 'length');
  assert.equal(next.choices[0]?.message.tool_calls, undefined, "tool_choice 'none' answers text");
  const bad = async (body: Record<string, unknown>, param: string, message: RegExp): Promise<void> => {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer k1' },
      body: JSON.stringify({ model: 'tiny', messages, max_tokens: 4, ...body }),
    });
    const json = (await res.json()) as { error: { param: string; message: string; type: string } };
    assert.equal(res.status, 400, JSON.stringify(json));
    assert.equal(json.error.type, 'invalid_request_error');
    assert.equal(json.error.param, param);
    assert.match(json.error.message, message);
  };
  await bad(
    { tools, tool_choice: { type: 'function', function: { name: 'nope' } } },
    'tool_choice',
    /'nope'/,
  );
  await bad({ tool_choice: 'required' }, 'tool_choice', /needs 'tools'/);
  await bad(
    { tools: [{ type: 'function', function: { name: 'a b' } }] },
    'tools[0].function.name',
    /letters/,
  );
  await bad({ tools: [tools[0], tools[0]] }, 'tools[1].function.name', /two tools/);
  await bad(
    {
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'string', pattern: 'x' } } }],
      tool_choice: 'required',
    },
    'tools[0].function.parameters',
    /"pattern" is not supported/,
  );
  await bad(
    { tools, tool_choice: 'required', response_format: { type: 'json_object' } },
    'response_format',
    /both set/,
  );
  await bad(
    {
      messages: [
        { role: 'assistant', content: null, tool_calls: [{ function: { name: 'f', arguments: '{' } }] },
      ],
    },
    'messages[0].tool_calls[0].function.arguments',
    /JSON text of an object/,
  );
});

test('openai client: response_format json_schema answers JSON of the schema, streamed or not; json_object an object', async () => {
  const schema = {
    type: 'object',
    properties: {
      answer: { type: 'string', maxLength: 6 },
      n: { type: 'integer' },
      mood: { enum: ['happy', 'sad', 3] },
      list: { type: 'array', items: { type: 'boolean' }, maxItems: 3 },
    },
    required: ['answer', 'mood'],
    additionalProperties: false,
  };
  const response_format = {
    type: 'json_schema' as const,
    json_schema: { name: 'reply', schema, strict: true },
  };
  for (const temperature of [0, 1]) {
    const r = await client.chat.completions.create({
      model: 'tiny',
      messages,
      max_tokens: 300,
      temperature,
      seed: 4,
      response_format,
    });
    const content = r.choices[0]?.message.content ?? '';
    // n's digits are the one unbounded part; a random model ends them well within 300 tokens
    assert.equal(r.choices[0]?.finish_reason, 'stop', content);
    const value = JSON.parse(content) as Record<string, unknown>;
    assert.deepEqual(
      Object.keys(value).filter((k) => k !== 'n' && k !== 'list'),
      ['answer', 'mood'],
    );
    assert.ok(typeof value.answer === 'string' && [...value.answer].length <= 6, content);
    assert.ok(['happy', 'sad', 3].includes(value.mood as string), content);
    if ('n' in value) assert.ok(Number.isInteger(value.n), content);
    if ('list' in value)
      assert.ok(
        Array.isArray(value.list) &&
          value.list.length <= 3 &&
          value.list.every((b) => typeof b === 'boolean'),
      );
    if (temperature === 0) {
      const stream = await client.chat.completions.create({
        model: 'tiny',
        messages,
        max_tokens: 300,
        temperature,
        response_format,
        stream: true,
      });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      assert.equal(text, content, 'streamed, the same greedy answer');
    }
  }
  const free = await client.chat.completions.create({
    model: 'tiny',
    messages,
    max_tokens: 40,
    temperature: 0,
    response_format: { type: 'json_object' },
  });
  const text = free.choices[0]?.message.content ?? '';
  assert.match(text.trimStart(), /^\{/, 'an object, or the start of one cut at max_tokens');
  if (free.choices[0]?.finish_reason === 'stop') assert.equal(typeof JSON.parse(text), 'object');
  await assert.rejects(
    client.chat.completions.create({
      model: 'tiny',
      messages,
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'x', schema: { type: 'string', format: 'email' } },
      },
    }),
    (e: unknown) => e instanceof OpenAI.BadRequestError && /"format" is not supported/.test(e.message),
  );
});

test('openai client: aborting a stream cancels it (the server stops generating its tokens)', async () => {
  slowMs = 10;
  try {
    const before = await metric(server.url, 'tandem:generation_tokens_total', { 'x-api-key': 'k1' });
    const stream = await client.chat.completions.create({
      model: 'tiny',
      messages,
      max_tokens: 400,
      temperature: 0,
      stream: true,
    });
    let chunks = 0;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content !== undefined && ++chunks === 3) stream.controller.abort();
    }
    await until(
      async () => (await metric(server.url, 'tandem:num_requests_running', { 'x-api-key': 'k1' })) === 0,
      'the slot freed',
    );
    const generated =
      (await metric(server.url, 'tandem:generation_tokens_total', { 'x-api-key': 'k1' })) - before;
    await sleep(100);
    assert.equal(
      (await metric(server.url, 'tandem:generation_tokens_total', { 'x-api-key': 'k1' })) - before,
      generated,
      'no token after the cancel',
    );
    assert.ok(generated < 20, `${generated} tokens generated for a stream aborted after 3`);
    assert.ok(
      (await metric(server.url, 'tandem:request_success_total{finished_reason="abort"}', {
        'x-api-key': 'k1',
      })) >= 1,
    );
  } finally {
    slowMs = 0;
  }
});

test('openai client: a bad key is a 401, a bad field a 400 naming it, an unknown model a 404', async () => {
  const wrong = new OpenAI({ apiKey: 'nope', baseURL: `${server.url}/v1`, maxRetries: 0 });
  await assert.rejects(
    wrong.models.list(),
    (e: unknown) => e instanceof OpenAI.AuthenticationError && e.status === 401,
  );
  await assert.rejects(
    client.chat.completions.create({ model: 'tiny', messages, temperature: 'hot' as unknown as number }),
    (e: unknown) =>
      e instanceof OpenAI.BadRequestError && e.param === 'temperature' && /temperature/.test(e.message),
  );
  await assert.rejects(
    client.chat.completions.create({ model: 'tiny', messages, n: 2 }),
    (e: unknown) => e instanceof OpenAI.BadRequestError && e.param === 'n' && /one choice/.test(e.message),
  );
  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-4o', messages }),
    (e: unknown) => e instanceof OpenAI.NotFoundError && e.param === 'model',
  );
});

test("openai client: past the queue a 429 with Retry-After, which the client's own retry honours until it succeeds", async () => {
  const small = await startTestServer(path(), {
    name: 'tiny',
    slots: 1,
    maxQueue: 1,
    stepHook: async () => {
      if (slowMs > 0) await sleep(slowMs);
    },
  });
  slowMs = 20;
  try {
    await small.ready;
    const c = new OpenAI({ apiKey: 'none', baseURL: `${small.url}/v1`, maxRetries: 0 });
    const running = await c.chat.completions.create({
      model: 'tiny',
      messages,
      max_tokens: 10,
      temperature: 0,
      stream: true,
    });
    const first = running[Symbol.asyncIterator]();
    await first.next(); // in its slot
    const queued = c.chat.completions.create({ model: 'tiny', messages, max_tokens: 10, temperature: 0 });
    await until(
      async () => (await metric(small.url, 'tandem:num_requests_waiting')) === 1,
      'the second request queued',
    );
    await assert.rejects(
      c.chat.completions.create({ model: 'tiny', messages, max_tokens: 2 }),
      (e: unknown) => e instanceof OpenAI.RateLimitError && e.headers.get('retry-after') === '1',
    );
    const retrying = new OpenAI({ apiKey: 'none', baseURL: `${small.url}/v1`, maxRetries: 5 });
    const started = Date.now();
    const late = retrying.chat.completions.create({ model: 'tiny', messages, max_tokens: 2, temperature: 0 });
    for (let r = await first.next(); !r.done; r = await first.next());
    assert.equal((await queued).choices[0]?.finish_reason, 'length');
    assert.equal((await late).usage?.completion_tokens, 2);
    assert.ok(Date.now() - started >= 900, 'the retry waited for Retry-After');
    assert.ok(
      (await metric(small.url, 'tandem:http_requests_total{route="/v1/chat/completions",status="429"}')) >= 2,
    );
  } finally {
    slowMs = 0;
    await small.close(0);
  }
});
