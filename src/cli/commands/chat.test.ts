import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadServedModel } from '../../api/index.js';
import { generate, type ChatMessage } from '../../engine/index.js';
import { TerminalSession } from '../chat/testing.js';
import { tempModel } from '../testing.js';

const path = tempModel('tandem-chat-cli-', { arch: 'qwen2', shape: 'tiny', type: 'f32', seed: 3 });

const MAX_TOKENS = 12;

/**
 * What `tandem chat --temperature 0` must answer to `messages`: the engine's greedy tokens on
 * the whole conversation rendered in the model's template, with a fresh cache (the chat keeps
 * its cache across turns: the answers must not show it), decoded as they stream.
 */
async function expectedAnswers(conversations: ChatMessage[][]): Promise<string[]> {
  const served = await loadServedModel(path(), { threads: 1 });
  try {
    const out: string[] = [];
    for (const messages of conversations) {
      const prompt = served.template.encode(served.tokenizer, messages);
      const r = await generate(served.model, served.model.newSession({ contextLength: 512 }), prompt, {
        maxTokens: MAX_TOKENS,
        stopTokens: served.stopTokens,
      });
      const decoder = served.tokenizer.streamDecoder();
      out.push(
        r.tokens
          .filter((t) => !served.stopTokens.has(t))
          .map((t) => decoder.push(t))
          .join('') + decoder.flush(),
      );
    }
    return out;
  } finally {
    await served.close();
  }
}

const user = (content: string): ChatMessage => ({ role: 'user', content });
const assistant = (content: string): ChatMessage => ({ role: 'assistant', content });

test('tandem chat in a terminal: the second answer follows from the first turn, /reset forgets it, /system sets the system message, /exit exits 0', async () => {
  const [first] = await expectedAnswers([[user('Hello')]]);
  const [second, alone, withSystem] = await expectedAnswers([
    [user('Hello'), assistant(first as string), user('And then?')],
    [user('And then?')],
    [{ role: 'system', content: 'Be brief.' }, user('Hello')],
  ]);
  // the test can tell a chat with history from one without only if the two answers differ
  assert.notEqual(second, alone);
  const chat = new TerminalSession([
    'chat',
    path(),
    '--temperature',
    '0',
    '--max-tokens',
    String(MAX_TOKENS),
    '--threads',
    '1',
  ]);
  try {
    await chat.next(/chatting with model \(qwen2.*\n/);
    await chat.next('> ');
    chat.line('Hello');
    await chat.next('Hello\n');
    assert.equal((await chat.next(/\n.*TTFT \d+ ms · [\d.]+ tok\/s.*\n/)).before, first);
    chat.line('And then?');
    await chat.next('And then?\n');
    const turn2 = await chat.next(/\n.*TTFT.*\n/);
    assert.equal(turn2.before, second);
    // the second turn prefilled only what the first turn's tokens did not already hold
    const [, prompt, prefilled] = /prompt (\d+) tokens, (\d+) prefilled/.exec(turn2.match) ?? [];
    assert.ok(Number(prefilled) < Number(prompt), turn2.match);
    chat.line('/reset');
    await chat.next('the conversation is forgotten');
    chat.line('And then?');
    await chat.next('And then?\n');
    assert.equal((await chat.next(/\n.*TTFT.*\n/)).before, alone);
    chat.line('/system Be brief.');
    await chat.next('system message set: Be brief.');
    chat.line('/reset');
    await chat.next('the conversation is forgotten (the system message stays)');
    chat.line('Hello');
    await chat.next('Hello\n');
    assert.equal((await chat.next(/\n.*TTFT.*\n/)).before, withSystem);
    chat.line('/help');
    await chat.next(/\/reset +forget the conversation/);
    chat.line('/exit');
    assert.equal(await chat.exit(), 0);
  } finally {
    chat.kill();
  }
});

test('tandem chat in a terminal: Ctrl-D and Ctrl-C at the prompt end it with exit code 0', async () => {
  for (const key of ['\x04', '\x03']) {
    const chat = new TerminalSession(['chat', path(), '--threads', '1']);
    try {
      await chat.next('> ');
      chat.keys(key);
      assert.equal(await chat.exit(), 0, chat.text);
    } finally {
      chat.kill();
    }
  }
});

test('tandem chat without MODEL chats with the shipped model; Ctrl-C during an answer stops it there, and the chat goes on past its context', async () => {
  // 480 tokens fill most of tandem-tiny's 512 positions: the answer runs long enough for the key to land
  const chat = new TerminalSession(['chat', '--max-tokens', '480', '--temperature', '0', '--threads', '1']);
  try {
    await chat.next('chatting with tandem-tiny (llama');
    await chat.next('> ');
    chat.line('Tell me a long story');
    await chat.next('story\n');
    await chat.next(/\S/);
    chat.keys('\x03');
    const stopped = await chat.next(/\n(\d+) tokens · .* · stopped\n/);
    assert.ok(Number(/(\d+) tokens/.exec(stopped.match)?.[1]) < 480, stopped.match);
    // with room for 480 more tokens, the next message fits the 512 positions only alone
    chat.line('And then?');
    await chat.next('And then?\n');
    await chat.next('the conversation no longer fits the context: the oldest turn was dropped');
    await chat.next(/\n.*TTFT.*\n/);
    chat.keys('\x03');
    assert.equal(await chat.exit(), 0);
  } finally {
    chat.kill();
  }
});

/** An OpenAI-compatible server that records each chat request and streams `words` back, `delayMs` apart. */
async function fakeServer(
  answer: (n: number) => { words: string[]; delayMs: number },
): Promise<{ url: string; requests: ChatMessage[][]; aborted: number[]; server: Server }> {
  const requests: ChatMessage[][] = [];
  const aborted: number[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      if (req.url === '/v1/models') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ object: 'list', data: [{ id: 'fake', object: 'model' }] }));
        return;
      }
      const n = requests.push((JSON.parse(body) as { messages: ChatMessage[] }).messages) - 1;
      res.on('close', () => {
        if (!res.writableFinished) aborted.push(n);
      });
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const { words, delayMs } = answer(n);
      const send = (i: number): void => {
        if (res.destroyed) return;
        if (i === words.length) {
          res.write(`data: ${JSON.stringify({ choices: [{ delta: {}, finish_reason: 'stop' }] })}\n\n`);
          res.write(
            `data: ${JSON.stringify({ choices: [], usage: { completion_tokens: words.length } })}\n\n`,
          );
          res.end('data: [DONE]\n\n');
          return;
        }
        res.write(
          `data: ${JSON.stringify({ choices: [{ delta: { content: words[i] }, finish_reason: null }] })}\n\n`,
        );
        setTimeout(() => send(i + 1), delayMs);
      };
      send(0);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests, aborted, server };
}

test('tandem chat --url in a terminal: each request carries the turns before it; Ctrl-C stops a streaming answer and the chat goes on', async () => {
  // the third answer is long and slow, so that Ctrl-C lands while it streams
  const fake = await fakeServer((n) =>
    n === 2
      ? { words: Array.from({ length: 400 }, (_, i) => ` w${i}`), delayMs: 25 }
      : { words: [`answer`, ` ${n + 1}`], delayMs: 0 },
  );
  const chat = new TerminalSession(['chat', '--url', fake.url, '--system', 'Be kind.']);
  try {
    await chat.next('chatting with fake at');
    await chat.next('> ');
    chat.line('one');
    await chat.next(/answer 1\n.*2 tokens.*\n/);
    chat.line('two');
    await chat.next(/answer 2\n/);
    chat.line('three');
    await chat.next(' w3');
    chat.keys('\x03');
    await chat.next(/stopped/);
    chat.line('four');
    await chat.next(/answer 4\n/);
    const system = { role: 'system', content: 'Be kind.' };
    assert.deepEqual(fake.requests[0], [system, user('one')]);
    assert.deepEqual(fake.requests[1], [system, user('one'), assistant('answer 1'), user('two')]);
    const fourth = fake.requests[3] as ChatMessage[];
    assert.deepEqual(fourth.slice(0, 6), [
      system,
      user('one'),
      assistant('answer 1'),
      user('two'),
      assistant('answer 2'),
      user('three'),
    ]);
    // the stopped answer stays in the history as far as it got
    const stopped = fourth[6] as ChatMessage;
    assert.equal(stopped.role, 'assistant');
    assert.match(stopped.content, /^ w0 w1 w2 w3/);
    assert.ok(stopped.content.length < 400 * 4, stopped.content);
    assert.deepEqual(fourth[7], user('four'));
    assert.deepEqual(fake.aborted, [2]);
    chat.keys('\x03');
    assert.equal(await chat.exit(), 0);
  } finally {
    chat.kill();
    fake.server.closeAllConnections();
    fake.server.close();
  }
});
