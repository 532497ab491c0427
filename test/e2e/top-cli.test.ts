import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApiServer } from '../../src/api/http-server.js';
import { loadClusterServedModel } from '../../src/api/cluster-served-model.js';
import { TerminalSession } from '../../src/cli/chat/testing.js';
import { tandemBin } from '../../src/cli/testing.js';
import type { ClusterView } from '../../src/cluster/cluster-view.js';
import { exitCodeFor } from '../../src/errors/index.js';
import { makeTestModelFile, PROMPT } from './parallel-models.js';

/*
 * `tandem top` against a generated model served over 2 local members (tensor parallel over
 * tcp): --once (and a pipe) prints the members, their links with measured figures, tokens/s
 * and the placement, then exits; at a terminal it redraws until Ctrl-C; a bad key and an
 * unreachable URL end with their typed errors.
 */

const KEY = 'top-key';
let dir = '';
let keyFile = '';
let server: ApiServer | undefined;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tandem-top-'));
  keyFile = join(dir, 'api.key');
  writeFileSync(keyFile, `${KEY}\n`);
  const path = await makeTestModelFile(dir, 'llama', 'llama', 'q8_0');
  server = await ApiServer.start({
    host: '127.0.0.1',
    port: 0,
    apiKey: KEY,
    maxBodyBytes: 1 << 20,
    slots: 1,
    maxQueue: 4,
    load: () => loadClusterServedModel(path, { nodes: 2, parallel: 'tp', provider: 'tcp', threads: 1 }),
  });
  await server.ready;
  const auth = { authorization: `Bearer ${KEY}` };
  const res = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: PROMPT, max_tokens: 4, temperature: 0 }),
  });
  assert.equal(res.status, 200);
  await res.json();
  // both members' links, and their compute and comm shares of the request, are in the view
  // once a heartbeat after the request has come (they may come in different heartbeats)
  const deadline = Date.now() + 10_000;
  for (;;) {
    const v = (await (await fetch(`${server.url}/v1/cluster`, { headers: auth })).json()) as ClusterView;
    const shares = v.members.every((m) => m.compute_share !== null && m.comm_share !== null);
    if (v.links.filter((l) => l.kind === 'tcp').length === 2 && shares) break;
    assert.ok(Date.now() < deadline, 'the members reported their links and shares within 10 s');
    await new Promise((r) => setTimeout(r, 200));
  }
});
after(async () => {
  await server?.close(0);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** `tandem top ARGS` with stdout a pipe, run asynchronously (the server answers from this process). */
function top(args: readonly string[], env: NodeJS.ProcessEnv = { ...process.env, TANDEM_API_KEY: '' }) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn(process.execPath, [tandemBin, 'top', ...args], { env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`tandem top did not exit within 30 s:\n${stdout}\n${stderr}`));
    }, 30_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

test(
  'top --once: members, links with their figures, tokens/s and the placement',
  { timeout: 60_000 },
  async () => {
    const url = (server as ApiServer).url;
    const r = await top(['--url', url, '--api-key-file', keyFile, '--once']);
    assert.equal(r.code, 0, r.stderr);
    const out = r.stdout;
    assert.match(out, /^tandem top · http:\/\/127\.0\.0\.1:\d+ · \S+ · ready · /);
    assert.match(out, /^[\d.]+ tok\/s \(last 5 s\) · 0\/1 running · 0 waiting · \d+ tokens generated/m);
    assert.match(out, /^placement: tp over tcp · placements 1 · re-placements 0$/m);
    assert.match(out, /^members \(2\)$/m);
    assert.match(out, /^ {2}ID +STATE +MEMORY +SPEED +COMPUTE +COMM +HEARD +ADDRESS$/m);
    for (const id of ['node 0', 'node 1'])
      assert.match(
        out,
        new RegExp(
          `^  ${id} +alive +[\\d.]+ [KMG]iB +\\S+ +\\d+% +\\d+% +\\d+ ms +127\\.0\\.0\\.1:\\d+$`,
          'm',
        ),
      );
    assert.match(out, /^links \(4\)$/m);
    assert.match(out, /^ {2}coordinator +node 0 +control +[\d.]+ [µm]s +- +[\d.]+ k?B\/s .* up$/m);
    assert.match(out, /^ {2}node 0 +node 1 +tcp +[\d.]+ [µm]s +[\d.]+ [MG]B\/s +[\d.]+ k?B\/s .* up$/m);
    assert.match(out, /^ {2}node 1 +node 0 +tcp +[\d.]+ [µm]s +[\d.]+ [MG]B\/s /m);
    assert.match(out, /^ {2}\d\d:\d\d:\d\d joined +node 0 \(127\.0\.0\.1:\d+\) joined$/m);

    // a pipe gets the same single screen without --once
    const piped = await top(['--url', url, '--api-key', KEY]);
    assert.equal(piped.code, 0, piped.stderr);
    assert.match(piped.stdout, /^members \(2\)$/m);
    assert.ok(!piped.stdout.includes('\u001b['), 'no terminal sequences into a pipe');
  },
);

test('top: a bad key, no key and an unreachable URL end with typed errors', { timeout: 60_000 }, async () => {
  const url = (server as ApiServer).url;
  const bad = await top(['--url', url, '--api-key', 'wrong', '--once']);
  assert.equal(bad.code, exitCodeFor('invalid_usage'));
  assert.match(bad.stderr, /refused the key \(401\)/);
  assert.match(bad.stderr, /check --api-key, --api-key-file or TANDEM_API_KEY/);
  const none = await top(['--url', url, '--once']);
  assert.equal(none.code, exitCodeFor('invalid_usage'));
  assert.match(none.stderr, /pass --api-key KEY, --api-key-file FILE or set TANDEM_API_KEY/);

  // a port that was free a moment ago: nothing listens there
  const free = createServer();
  await new Promise<void>((r) => free.listen(0, '127.0.0.1', r));
  const port = (free.address() as { port: number }).port;
  await new Promise<void>((r) => free.close(() => r()));
  const gone = await top(['--url', `http://127.0.0.1:${port}`, '--api-key', KEY, '--once']);
  assert.equal(gone.code, exitCodeFor('system'));
  assert.match(gone.stderr, /cannot read the cluster from http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\)/);
  const notUrl = await top(['--url', 'localhost:8080', '--once']);
  assert.equal(notUrl.code, exitCodeFor('invalid_usage'));
  assert.match(notUrl.stderr, /--url 'localhost:8080' is not an http\(s\) URL/);
  const both = await top(['--url', url, '--api-key', KEY, '--api-key-file', keyFile]);
  assert.match(both.stderr, /--api-key and --api-key-file both given/);
});

test('top at a terminal: redraws until Ctrl-C, then exits 0', { timeout: 60_000 }, async () => {
  const url = (server as ApiServer).url;
  const t = new TerminalSession(['top', '--url', url, '--interval', '0.3'], {
    ...process.env,
    TANDEM_API_KEY: KEY,
  });
  try {
    await t.next(/members \(2\)/, 20_000);
    // a second screen: it redraws
    await t.next(/members \(2\)/, 10_000);
    t.keys('\x03');
    assert.equal(await t.exit(10_000), 0);
  } finally {
    t.kill();
  }
});
