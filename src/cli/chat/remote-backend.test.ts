import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { startTestServer } from '../../api/testing.js';
import { exitCodeFor, type ErrorCategory } from '../../errors/index.js';
import { tempModel } from '../testing.js';
import { chatPiped } from './testing.js';
import { baseUrl } from './remote-backend.js';

const path = tempModel('tandem-chat-url-', { arch: 'qwen2', shape: 'tiny', type: 'f32', seed: 3 });

const exitFor = (category: ErrorCategory): number => exitCodeFor(category);

test('baseUrl: http(s) only, without a trailing / or /v1', () => {
  assert.equal(baseUrl('http://127.0.0.1:8080'), 'http://127.0.0.1:8080');
  assert.equal(baseUrl('http://127.0.0.1:8080/v1/'), 'http://127.0.0.1:8080');
  assert.equal(baseUrl('https://example.com/proxy/v1'), 'https://example.com/proxy');
  for (const bad of ['127.0.0.1:8080', 'ftp://host', 'not a url', ''])
    assert.throws(() => baseUrl(bad), { code: 'CLI_CHAT_BAD_URL' }, bad);
});

test('tandem chat --url against tandem serve: the same greedy answers as the model loaded by tandem chat itself, history included', async () => {
  const server = await startTestServer(path(), { name: 'tiny' });
  try {
    await server.ready;
    const lines = ['Hello', 'And then?', '/reset', 'And then?'];
    const args = ['--temperature', '0', '--max-tokens', '10'];
    const remote = await chatPiped(['--url', server.url, ...args], lines);
    const local = await chatPiped([path(), '--threads', '1', ...args], lines);
    assert.equal(remote.code, 0, remote.stderr);
    assert.equal(local.code, 0, local.stderr);
    assert.match(remote.stderr, /chatting with tiny at http:\/\/127\.0\.0\.1:\d+/);
    const answers = remote.stdout.split('\n').slice(0, 3);
    assert.equal(answers.length, 3);
    assert.equal(remote.stdout, local.stdout);
    // the second answer had the first turn before it; after /reset the same message gets another
    assert.notEqual(answers[1], answers[2]);
    assert.equal((remote.stderr.match(/\d+ tokens? · TTFT \d+ ms · [\d.]+ tok\/s/g) ?? []).length, 3);
  } finally {
    await server.close(0);
  }
});

test('tandem chat --url: a bad URL, no server, a missing or wrong key and an unknown model are typed errors', async () => {
  const free = createServer();
  await new Promise<void>((resolve) => free.listen(0, '127.0.0.1', resolve));
  const closedPort = (free.address() as AddressInfo).port;
  await new Promise((resolve) => free.close(resolve));
  const server = await startTestServer(path(), { name: 'tiny', apiKey: 'k' });
  const env = { ...process.env, TANDEM_API_KEY: '' };
  try {
    await server.ready;
    const cases: [string[], NodeJS.ProcessEnv, string, ErrorCategory][] = [
      [['--url', 'localhost:8080'], env, 'CLI_CHAT_BAD_URL', 'invalid_argument'],
      [['--url', `http://127.0.0.1:${closedPort}`], env, 'CLI_CHAT_UNREACHABLE', 'system'],
      [['--url', server.url], env, 'CLI_CHAT_AUTH', 'invalid_usage'],
      [['--url', server.url, '--api-key', 'wrong'], env, 'CLI_CHAT_AUTH', 'invalid_usage'],
      [['other', '--url', server.url], { ...env, TANDEM_API_KEY: 'k' }, 'CLI_CHAT_MODEL', 'invalid_argument'],
      [['--url', server.url, '--top-k', '5'], env, 'CLI_USAGE', 'invalid_usage'],
      [[path(), '--api-key', 'k'], env, 'CLI_USAGE', 'invalid_usage'],
    ];
    for (const [args, e, code, category] of cases) {
      const r = await chatPiped(args, ['Hello'], e);
      assert.equal(r.code, exitFor(category), `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, new RegExp(`error \\[${code}\\]: .*\\n  hint: `), args.join(' '));
    }
    const ok = await chatPiped(['tiny', '--url', `${server.url}/v1`, '--max-tokens', '4'], ['Hello'], {
      ...env,
      TANDEM_API_KEY: 'k',
    });
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stderr, /4 tokens · TTFT/);
  } finally {
    await server.close(0);
  }
});

test('tandem chat: a conversation past the context drops its oldest turns and says so, on this machine and over --url', async () => {
  const server = await startTestServer(path(), { context: 64 });
  try {
    await server.ready;
    const lines = Array.from({ length: 6 }, (_, i) => `Tell me about the number ${i}.`);
    const args = ['--temperature', '0', '--max-tokens', '8', '--system', 'Count.'];
    for (const where of [
      ['--url', server.url],
      [path(), '--threads', '1', '--context', '64'],
    ]) {
      const r = await chatPiped([...where, ...args], lines);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stderr, /no longer fits the context: the (\d+ )?oldest turns? (was|were) dropped/);
      // every message got an answer
      assert.equal((r.stderr.match(/TTFT/g) ?? []).length, lines.length, r.stderr);
    }
    // a message that cannot fit at all is refused, and the chat goes on
    const long = 'word '.repeat(200);
    const r = await chatPiped([path(), '--threads', '1', '--context', '64', ...args], [long, 'Hi']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(
      r.stderr,
      /error \[CLI_CHAT_CONTEXT\]: the conversation has \d+ tokens, more than the context of 64/,
    );
    assert.equal((r.stderr.match(/TTFT/g) ?? []).length, 1, r.stderr);
  } finally {
    await server.close(0);
  }
});
