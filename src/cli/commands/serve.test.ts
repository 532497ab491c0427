import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { runTandem, tandemBin, tempModel } from '../testing.js';

const path = tempModel('tandem-serve-cli-', { arch: 'qwen2', shape: 'tiny', type: 'q8_0', seed: 3 });

/** Resolves with the first match of `pattern` in the child's stderr; rejects after `timeoutMs` or if it exits first. */
function untilStderr(child: ChildProcess, pattern: RegExp, timeoutMs: number): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    let text = '';
    const timer = setTimeout(
      () => reject(new Error(`no ${pattern} on stderr within ${timeoutMs} ms:\n${text}`)),
      timeoutMs,
    );
    child.stderr?.on('data', (d: Buffer) => {
      text += d.toString();
      const m = pattern.exec(text);
      if (m) {
        clearTimeout(timer);
        resolve(m);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`tandem serve exited (${code}) before ${pattern}:\n${text}`));
    });
  });
}

function exited(child: ChildProcess, timeoutMs: number): Promise<number | null> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`tandem serve did not exit within ${timeoutMs} ms`)),
      timeoutMs,
    );
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
}

/** `tandem serve` on the generated model, or with `model` null on the shipped one. */
function serve(
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
  model: string | null = path(),
): ChildProcess {
  const file = model === null ? [] : [model];
  return spawn(process.execPath, [tandemBin, 'serve', ...file, '--port', '0', '--threads', '1', ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env,
  });
}

test('tandem serve: load progress then `listening on`, the key from TANDEM_API_KEY, a streamed chat, SIGTERM finishes the stream and exits 0', async () => {
  const child = serve(['--model-name', 'tiny', '--slots', '2'], { ...process.env, TANDEM_API_KEY: 'k' });
  try {
    const [, url] = (await untilStderr(
      child,
      /listening on (http:\/\/127\.0\.0\.1:\d+)/,
      30_000,
    )) as unknown as [string, string];
    assert.equal((await fetch(`${url}/health`)).status, 200);
    assert.equal((await fetch(`${url}/v1/models`)).status, 401);
    const models = (await (await fetch(`${url}/v1/models`, { headers: { 'x-api-key': 'k' } })).json()) as {
      data: { id: string }[];
    };
    assert.deepEqual(
      models.data.map((m) => m.id),
      ['tiny'],
    );
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer k', 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'tiny',
        messages: [{ role: 'user', content: 'Hi' }],
        max_tokens: 200,
        temperature: 0,
        stream: true,
      }),
    });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    await reader.read(); // the stream runs
    child.kill('SIGTERM');
    let text = '';
    for (let r = await reader.read(); !r.done; r = await reader.read())
      text += Buffer.from(r.value).toString();
    assert.ok(text.trimEnd().endsWith('data: [DONE]'), 'the running stream finished');
    assert.equal(await exited(child, 10_000), 0);
  } finally {
    child.kill('SIGKILL');
  }
});

test('tandem serve: a non-loopback --host without a key warns; SIGINT exits 0; --help and bad options', async () => {
  const child = serve(['--host', '0.0.0.0']);
  try {
    await untilStderr(
      child,
      /warning: listening on 0\.0\.0\.0 without an API key[\s\S]*listening on http:/,
      30_000,
    );
    child.kill('SIGINT');
    assert.equal(await exited(child, 10_000), 0);
  } finally {
    child.kill('SIGKILL');
  }
  const help = runTandem(['serve', '--help']);
  assert.equal(help.code, 0);
  for (const word of [
    '--slots',
    '--max-queue',
    '--prefill-chunk',
    '--api-key',
    'TANDEM_API_KEY',
    '/v1/chat/completions',
  ])
    assert.ok(help.stdout.includes(word), word);
  const bad = runTandem(['serve', path(), '--slots', '0']);
  assert.equal(bad.code, 3);
  assert.match(bad.stderr, /--slots must be/);
  // a piece shorter than the GEMM's size class would change a prompt's bits: refused
  const short = runTandem(['serve', path(), '--prefill-chunk', '8']);
  assert.equal(short.code, 3);
  assert.match(short.stderr, /--prefill-chunk must be an integer in 12\.\.1024, got 8/);
});

test('tandem serve without MODEL serves the shipped model and answers in words', async () => {
  const child = serve([], process.env, null);
  try {
    const [, url] = (await untilStderr(
      child,
      /listening on (http:\/\/127\.0\.0\.1:\d+)/,
      30_000,
    )) as unknown as [string, string];
    const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string }[] };
    assert.deepEqual(
      models.data.map((m) => m.id),
      ['tandem-tiny'],
    );
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'And the LORD said', max_tokens: 24, temperature: 0 }),
    });
    assert.equal(res.status, 200);
    const body = (await res.json()) as { choices: { text: string }[]; usage: { completion_tokens: number } };
    assert.ok(body.usage.completion_tokens > 0);
    assert.match(body.choices[0]?.text ?? '', /[a-z]{3,}/i);
    child.kill('SIGTERM');
    assert.equal(await exited(child, 10_000), 0);
  } finally {
    child.kill('SIGKILL');
  }
  const help = runTandem(['serve', '--help']);
  assert.match(help.stdout, /Without MODEL it serves the model that ships with tandem/);
});
