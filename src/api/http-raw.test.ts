import { after, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { ChatTemplate, generate, openModel, type OpenedModel } from '../engine/index.js';
import { tempModel } from '../engine/testing/temp-model.js';
import { GEMM_TOKENS } from '../kernels/index.js';
import { ApiServer } from './http-server.js';
import { loadServedModel, type ServedModel } from './served-model.js';
import { startTestServer } from './testing.js';
import type { OpenAiErrorBody } from './errors.js';
import { TandemError } from '../errors/index.js';

/*
 * Raw HTTP against an in-process server: what a client library hides (chunk order and
 * fields, ids, [DONE], error events, statuses and headers), checked against the engine run
 * directly on the same generated model.
 */

const path = tempModel('tandem-serve-raw-', { arch: 'qwen2', shape: 'tiny', type: 'q8_0', seed: 5 });
let server: ApiServer;
let engine: OpenedModel;
/** The step at which the step hook throws (once), or -1; and what it throws. */
let failAt = -1;
let failWith: Error = new Error('injected fault');

beforeEach(async () => {
  if (engine) return;
  engine = await openModel(path(), { threads: 1 });
  server = await startTestServer(path(), {
    name: 'tiny',
    slots: 8,
    maxBodyBytes: 64 * 1024,
    stepHook: (generated) => {
      if (generated === failAt) {
        failAt = -1;
        throw failWith;
      }
    },
  });
  await server.ready;
});
after(async () => {
  await server?.close(0);
  await engine?.close();
});

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens: number };
}
interface Chunk {
  id: string;
  object: string;
  created: number;
  model: string;
  choices: { index: number; delta: Record<string, unknown>; text?: string; finish_reason: string | null }[];
  usage?: Usage | null;
}
type ErrorJson = OpenAiErrorBody;

function post(route: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${server.url}${route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

/** The `data:` payloads of an event stream, in order. */
async function events(res: Response): Promise<string[]> {
  const text = await res.text();
  assert.ok(text.endsWith('\n\n'), 'every event ends with a blank line');
  return text
    .split('\n\n')
    .filter((e) => e !== '')
    .map((e) => {
      assert.ok(e.startsWith('data: '), e);
      return e.slice('data: '.length);
    });
}

/** The engine's greedy tokens for a prompt, cut after the first end-of-generation token. */
async function greedyAlone(prompt: number[], maxTokens: number): Promise<{ tokens: number[]; text: string }> {
  const tokenizer = engine.tokenizer!;
  const r = await generate(engine.model, engine.model.newSession({ contextLength: 512 }), prompt, {
    maxTokens,
  });
  const eog = r.tokens.findIndex((t) => tokenizer.isEndOfGeneration(t));
  const tokens = eog < 0 ? r.tokens : r.tokens.slice(0, eog + 1);
  return { tokens, text: tokenizer.decode(tokens.filter((t) => !tokenizer.isEndOfGeneration(t))) };
}

test('a chat stream: role first, one id and created, finish_reason on the last choice chunk, the usage chunk, [DONE]; usage exact', async () => {
  const messages = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Hello there' },
  ];
  const res = await post('/v1/chat/completions', {
    model: 'tiny',
    messages,
    max_tokens: 10,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
  const data = await events(res);
  assert.equal(data.at(-1), '[DONE]');
  const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as Chunk);
  assert.equal(new Set(chunks.map((c) => c.id)).size, 1);
  assert.match(chunks[0]!.id, /^chatcmpl-/);
  assert.equal(new Set(chunks.map((c) => c.created)).size, 1);
  for (const c of chunks) {
    assert.deepEqual(Object.keys(c), ['id', 'object', 'created', 'model', 'choices', 'usage']);
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(c.model, 'tiny');
  }
  assert.deepEqual(chunks[0]!.choices[0]!.delta, { role: 'assistant', content: '', refusal: null });
  const usageChunk = chunks.at(-1)!;
  assert.deepEqual(usageChunk.choices, []);
  const last = chunks.at(-2)!;
  assert.deepEqual(last.choices[0]!.delta, {});
  assert.ok(['stop', 'length'].includes(last.choices[0]!.finish_reason ?? ''));
  const middle = chunks.slice(1, -2);
  for (const c of [chunks[0]!, ...middle]) {
    assert.equal(c.choices[0]!.finish_reason, null);
    assert.equal(c.usage, null);
  }
  const text = middle.map((c) => c.choices[0]!.delta.content as string).join('');

  const tokenizer = engine.tokenizer!;
  const prompt = ChatTemplate.fromModel(engine.file.meta('tokenizer.chat_template') as string).encode(
    tokenizer,
    messages,
  );
  const alone = await greedyAlone(prompt, 10);
  assert.equal(text, alone.text);
  const { prompt_tokens_details: details, ...counts } = usageChunk.usage!;
  assert.deepEqual(counts, {
    prompt_tokens: prompt.length,
    completion_tokens: alone.tokens.length,
    total_tokens: prompt.length + alone.tokens.length,
  });
  // what a slot held of this prompt from earlier requests; never its last GEMM_TOKENS
  const cached = details?.cached_tokens ?? -1;
  assert.ok(
    Number.isInteger(cached) && cached >= 0 && cached <= Math.max(0, prompt.length - GEMM_TOKENS),
    `cached ${cached}`,
  );
});

test('a completion stream over token ids: text_completion chunks, then [DONE]', async () => {
  const res = await post('/v1/completions', {
    prompt: [11, 12, 13],
    max_tokens: 6,
    temperature: 0,
    stream: true,
  });
  const data = await events(res);
  assert.equal(data.at(-1), '[DONE]');
  const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as Chunk);
  assert.equal(new Set(chunks.map((c) => c.id)).size, 1);
  assert.ok(chunks.every((c) => c.object === 'text_completion' && !('usage' in c)));
  assert.equal(chunks.at(-1)!.choices[0]!.finish_reason, 'length');
  const text = chunks.map((c) => c.choices[0]!.text as string).join('');
  assert.equal(text, (await greedyAlone([11, 12, 13], 6)).text);
});

test('echo: the prompt (as sent, or its ids decoded) comes before the completion, whole and streamed', async () => {
  const alone = (await greedyAlone([11, 12, 13], 4)).text;
  const decoded = engine.tokenizer!.decode([11, 12, 13]);
  const whole = (await (
    await post('/v1/completions', { prompt: [11, 12, 13], max_tokens: 4, temperature: 0, echo: true })
  ).json()) as { choices: { text: string }[] };
  assert.equal(whole.choices[0]!.text, decoded + alone);
  const data = await events(
    await post('/v1/completions', {
      prompt: 'Once upon',
      max_tokens: 4,
      temperature: 0,
      echo: true,
      stream: true,
    }),
  );
  const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as Chunk);
  const text = chunks.map((c) => c.choices[0]!.text as string).join('');
  assert.ok(text.startsWith('Once upon'), text);
  assert.ok(text.length > 'Once upon'.length, 'the completion follows the echoed prompt');
  assert.equal((await post('/v1/completions', { prompt: 'a', echo: true, logprobs: 1 })).status, 400);
});

test('a failure after streaming began is one error event, then the stream closes without [DONE]', async () => {
  failAt = 3;
  const res = await post('/v1/chat/completions', {
    messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 20,
    temperature: 0,
    stream: true,
  });
  assert.equal(res.status, 200);
  const data = await events(res);
  assert.ok(!data.includes('[DONE]'));
  const lastEvent = JSON.parse(data.at(-1)!) as { error: { message: string; type: string; code: string } };
  assert.deepEqual(Object.keys(lastEvent.error), ['message', 'type', 'param', 'code']);
  assert.equal(lastEvent.error.type, 'server_error');
  assert.match(lastEvent.error.message, /injected fault/);
  const content = data.slice(0, -1).map((d) => JSON.parse(d) as Chunk);
  assert.deepEqual(content[0]!.choices[0]!.delta.role, 'assistant');
  assert.ok(
    content.every((c) => c.choices[0]!.finish_reason === null),
    'no finish_reason before the error',
  );
  // an engine error after the request was accepted is the server's failure (500), not the request's (400)
  failAt = 1;
  failWith = new TandemError('SAMPLER_LOGITS', 'logit 7 is NaN', { hint: 'check the kernels' });
  const failed = await post('/v1/completions', { prompt: 'x', max_tokens: 5 });
  assert.equal(failed.status, 500);
  const e = ((await failed.json()) as ErrorJson).error;
  assert.equal(e.type, 'server_error');
  assert.match(e.message, /the generation failed: logit 7 is NaN/);
  // the server goes on serving
  const ok = await post('/v1/completions', { prompt: 'x', max_tokens: 2 });
  assert.equal(ok.status, 200);
});

test('8 concurrent greedy streams (8 slots: one batched decode step for all) each equal the same prompt run alone', async () => {
  const prompts = Array.from({ length: 8 }, (_, i) =>
    Array.from({ length: 3 + i * 23 }, (_, j) => (i * 131 + j * 17) % 4000),
  );
  const runs = prompts.map(async (prompt) => {
    const res = await post('/v1/completions', {
      prompt,
      max_tokens: 12,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = (await events(res)).slice(0, -1).map((d) => JSON.parse(d) as Chunk);
    return { text: chunks.map((c) => c.choices[0]?.text ?? '').join(''), usage: chunks.at(-1)!.usage };
  });
  const served = await Promise.all(runs);
  for (const [i, prompt] of prompts.entries()) {
    const alone = await greedyAlone(prompt, 12);
    assert.equal(served[i]!.text, alone.text, `prompt ${i}`);
    assert.equal(served[i]!.usage!.completion_tokens, alone.tokens.length);
    assert.equal(served[i]!.usage!.prompt_tokens, prompt.length);
  }
});

test('statuses: 413 past the body limit, 400 for a prompt past the context (both numbers) and for bad JSON, 404 for a route', async () => {
  const big = await post('/v1/completions', { prompt: 'x'.repeat(100 * 1024) });
  assert.equal(big.status, 413);
  assert.match(((await big.json()) as ErrorJson).error.message, /65536 bytes/);
  // without a Content-Length (chunked): refused once the bytes read pass the limit
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (let i = 0; i < 10; i++) controller.enqueue(new Uint8Array(10 * 1024).fill(0x20));
      controller.close();
    },
  });
  const chunked = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    body,
    duplex: 'half',
  } as RequestInit);
  assert.equal(chunked.status, 413);
  assert.equal(((await chunked.json()) as ErrorJson).error.code, 'request_too_large');
  const long = await post('/v1/completions', { prompt: Array.from({ length: 600 }, () => 7) });
  assert.equal(long.status, 400);
  const e = ((await long.json()) as ErrorJson).error;
  assert.equal(e.param, 'prompt');
  assert.match(e.message, /600 tokens.*512 tokens/);
  const tooMany = await post('/v1/completions', { prompt: [1, 2, 3], max_tokens: 511 });
  assert.equal(tooMany.status, 400);
  assert.match(((await tooMany.json()) as ErrorJson).error.message, /510/);
  const notJson = await fetch(`${server.url}/v1/completions`, { method: 'POST', body: '{"prompt": ' });
  assert.equal(notJson.status, 400);
  assert.equal(((await notJson.json()) as ErrorJson).error.type, 'invalid_request_error');
  const route = await fetch(`${server.url}/v2/anything`);
  assert.equal(route.status, 404);
  const tokens = (
    (await (await post('/tokenize', { content: 'Hello world' })).json()) as { tokens: number[] }
  ).tokens;
  assert.deepEqual(tokens, engine.tokenizer!.encode('Hello world'));
  assert.deepEqual(await (await post('/detokenize', { tokens })).json(), { content: 'Hello world' });
});

test('/health is 503 with Retry-After while the model loads (and so are the model routes), 200 after; the key guards all but /health', async () => {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const loading = await ApiServer.start({
    host: '127.0.0.1',
    port: 0,
    maxBodyBytes: 1024,
    slots: 1,
    maxQueue: 1,
    apiKey: 'secret',
    load: async (): Promise<ServedModel> => {
      await gate;
      return loadServedModel(path(), { threads: 1 });
    },
  });
  try {
    const health = await fetch(`${loading.url}/health`);
    assert.equal(health.status, 503);
    assert.equal(health.headers.get('retry-after'), '2');
    const chat = await fetch(`${loading.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'x-api-key': 'secret' },
      body: '{}',
    });
    assert.equal(chat.status, 503);
    assert.ok(chat.headers.get('retry-after'));
    assert.deepEqual(
      await (await fetch(`${loading.url}/v1/models`, { headers: { authorization: 'Bearer secret' } })).json(),
      { object: 'list', data: [] },
    );
    release();
    await loading.ready;
    const ok = await fetch(`${loading.url}/health`);
    assert.equal(ok.status, 200);
    assert.deepEqual(await ok.json(), { status: 'ok' });
    assert.equal((await fetch(`${loading.url}/metrics`)).status, 401);
    assert.equal((await fetch(`${loading.url}/metrics`, { headers: { 'x-api-key': 'wrong' } })).status, 401);
    assert.equal((await fetch(`${loading.url}/metrics`, { headers: { 'x-api-key': 'secret' } })).status, 200);
    const models = (await (
      await fetch(`${loading.url}/v1/models`, { headers: { authorization: 'Bearer secret' } })
    ).json()) as { data: { id: string }[] };
    assert.equal(models.data[0]?.id, 'model');
  } finally {
    release();
    await loading.close(0);
  }
});

test("CORS: a listed origin's preflight is answered without the key and its answers (streams too) carry the origin; others get no grant", async () => {
  const app = 'http://localhost:3000';
  const cors = await startTestServer(path(), { slots: 1, apiKey: 'k', corsOrigins: [app] });
  try {
    await cors.ready;
    const pre = await fetch(`${cors.url}/v1/chat/completions`, {
      method: 'OPTIONS',
      headers: {
        origin: app,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type, x-stainless-os',
      },
    });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get('access-control-allow-origin'), app);
    assert.match(pre.headers.get('access-control-allow-methods') ?? '', /POST/);
    assert.equal(
      pre.headers.get('access-control-allow-headers'),
      'authorization, content-type, x-stainless-os',
    );
    const body = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, stream: true });
    const headers = { origin: app, authorization: 'Bearer k', 'content-type': 'application/json' };
    const stream = await fetch(`${cors.url}/v1/chat/completions`, { method: 'POST', headers, body });
    assert.equal(stream.status, 200);
    assert.equal(stream.headers.get('access-control-allow-origin'), app);
    assert.match(await stream.text(), /data: \[DONE\]/);
    // the key still guards the route, and the refusal is readable by the page
    const refused = await fetch(`${cors.url}/v1/models`, { headers: { origin: app } });
    assert.equal(refused.status, 401);
    assert.equal(refused.headers.get('access-control-allow-origin'), app);
    // another origin: no grant on its answers, and its preflight is a 403 that names it
    const other = await fetch(`${cors.url}/v1/models`, {
      headers: { origin: 'http://evil.example', authorization: 'Bearer k' },
    });
    assert.equal(other.status, 200);
    assert.equal(other.headers.get('access-control-allow-origin'), null);
    assert.equal(other.headers.get('vary'), 'Origin', 'an answer that depends on the origin says so');
    const otherPre = await fetch(`${cors.url}/v1/models`, {
      method: 'OPTIONS',
      headers: { origin: 'http://evil.example', 'access-control-request-method': 'GET' },
    });
    assert.equal(otherPre.status, 403);
    assert.match(((await otherPre.json()) as OpenAiErrorBody).error.message, /http:\/\/evil\.example/);
  } finally {
    await cors.close(0);
  }
  // without corsOrigins no answer carries a grant, and a preflight says how to allow one
  const res = await fetch(`${server.url}/v1/models`, { headers: { origin: app } });
  assert.equal(res.headers.get('access-control-allow-origin'), null);
  const pre = await fetch(`${server.url}/v1/models`, { method: 'OPTIONS', headers: { origin: app } });
  assert.equal(pre.status, 403);
  assert.match(((await pre.json()) as OpenAiErrorBody).error.message, /--cors/);
});
