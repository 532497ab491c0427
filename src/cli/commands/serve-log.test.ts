import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { runTandem, tandemBin } from '../testing.js';

/*
 * `tandem serve --log-format`: request lines on stdout (the startup lines stay on stderr),
 * one JSON object a line with json, one text line a request with pretty. Serves the shipped
 * model (no file to make).
 */

/** Serves, sends one chat, stops with SIGTERM; resolves with stdout and stderr once it exited. */
async function serveOneRequest(format: string): Promise<{ stdout: string; stderr: string; id: string }> {
  const child = spawn(
    process.execPath,
    [tandemBin, 'serve', '--port', '0', '--threads', '1', '--log-format', format],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no 'listening on' within 30 s:\n${stderr}`)), 30_000);
      child.stderr.setEncoding('utf8').on('data', (d: string) => {
        stderr += d;
        const m = /listening on (http:\/\/\S+)/.exec(stderr);
        if (m) {
          clearTimeout(timer);
          resolve(m[1] as string);
        }
      });
      void exited.then(() => reject(new Error(`tandem serve exited before listening:\n${stderr}`)));
    });
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3 }),
    });
    assert.equal(res.status, 200);
    await res.json();
    child.kill('SIGTERM');
    const code = await Promise.race([
      exited,
      new Promise((_, reject) => setTimeout(() => reject(new Error('no exit within 10 s')), 10_000)),
    ]);
    assert.equal(code, 0, stderr);
    return { stdout, stderr, id: res.headers.get('x-request-id') ?? '' };
  } finally {
    child.kill('SIGKILL');
  }
}

test('tandem serve --log-format json: one JSON line per request on stdout, startup lines on stderr', async () => {
  const { stdout, stderr, id } = await serveOneRequest('json');
  const lines = stdout.trimEnd().split('\n');
  assert.equal(lines.length, 1, stdout);
  const line = JSON.parse(lines[0]!) as Record<string, unknown>;
  assert.equal(line.msg, 'request');
  assert.equal(line.id, id);
  assert.equal(line.route, 'POST /v1/chat/completions');
  assert.equal(line.status, 200);
  assert.ok(line.outcome === 'length' || line.outcome === 'stop', String(line.outcome));
  for (const t of ['queue_ms', 'ttft_ms', 'total_ms']) assert.equal(typeof line[t], 'number', t);
  assert.match(stderr, /listening on http:/);
  assert.doesNotMatch(stderr, /"msg":"request"/);
});

test('tandem serve --log-format pretty: one text line per request; an unknown format is a usage error', async () => {
  const { stdout, id } = await serveOneRequest('pretty');
  const lines = stdout.trimEnd().split('\n');
  assert.equal(lines.length, 1, stdout);
  assert.match(lines[0]!, /INFO.*request/);
  assert.ok(lines[0]!.includes(id), lines[0]);
  assert.throws(() => JSON.parse(lines[0]!));

  const bad = runTandem(['serve', '--log-format', 'xml']);
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /log-format/);
});
