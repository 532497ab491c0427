import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ApiServer } from '../../src/api/http-server.js';
import { loadClusterServedModel } from '../../src/api/cluster-served-model.js';
import { startTestServer, until } from '../../src/api/testing.js';
import type { ClusterView } from '../../src/cluster/index.js';
import { tandemBin } from '../../src/cli/testing.js';
import { configFromMetadata } from '../../src/engine/model/config.js';
import { GgufModelFile } from '../../src/engine/model/gguf-model-file.js';
import { placeModel } from '../../src/parallel/index.js';
import { makePoolingModel, PROMPT } from './parallel-models.js';

/*
 * Members that join: `tandem node --join` processes dial the serving process's cluster port.
 * The model is placed once enough have joined, placed again on every member when one more
 * joins (streams go on, with the text each prompt has alone), and when members are lost and
 * the rest cannot hold it, /health and new requests get 503 with the sizes until a member
 * joins again.
 */

const secret = 'join-test-secret-0123456789abcdef';
let dir = '';
const members: ChildProcess[] = [];
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tandem-cluster-join-'));
});
after(() => {
  for (const m of members) m.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

function member(address: string, extra: string[] = []): ChildProcess {
  const child = spawn(process.execPath, [tandemBin, 'node', '--join', address, '--threads', '1', ...extra], {
    stdio: ['ignore', 'ignore', 'ignore'],
    env: { ...process.env, TANDEM_SECRET: secret, TANDEM_SPEED_PROBE: '0' },
  });
  members.push(child);
  return child;
}

async function startServer(
  model: string,
  o: { minMembers: number; memLimit?: number; stepHook?: () => Promise<void> },
): Promise<{ server: ApiServer; port: string }> {
  let port = '';
  const server = await ApiServer.start({
    host: '127.0.0.1',
    port: 0,
    maxBodyBytes: 1 << 20,
    slots: 4,
    maxQueue: 8,
    ...(o.stepHook ? { stepHook: o.stepHook } : {}),
    load: () =>
      loadClusterServedModel(model, {
        cluster: '127.0.0.1:0',
        minMembers: o.minMembers,
        secret,
        ...(o.memLimit !== undefined ? { memLimit: o.memLimit } : {}),
        onClusterPort: (a) => (port = a),
      }),
  });
  await until(() => port !== '', 'the cluster port listens');
  return { server, port };
}

async function view(url: string): Promise<ClusterView> {
  return (await (await fetch(`${url}/v1/cluster`)).json()) as ClusterView;
}

async function complete(
  url: string,
  prompt: number[],
  maxTokens = 16,
): Promise<{ status: number; text: string; body: string }> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0 }),
    signal: AbortSignal.timeout(60_000),
  });
  const body = await res.text();
  const text =
    res.status === 200 ? ((JSON.parse(body) as { choices: { text: string }[] }).choices[0]?.text ?? '') : '';
  return { status: res.status, text, body };
}

const prompts = Array.from({ length: 4 }, (_, i) => PROMPT.map((t) => ((t + 41 * i) % 500) + 3));

describe('members that join', { timeout: 240_000 }, () => {
  it('placed once 2 have joined; a third joins during 4 streams: placed on 3, every text as alone', async () => {
    // a model whose weights outweigh the collectives' latency, so the cost model predicts the
    // third member pays beyond the re-plan margin (on the tiny model it would not: no re-plan)
    const { path } = await makePoolingModel(dir);
    const one = await startTestServer(path, { slots: 1 });
    const alone: string[] = [];
    try {
      await one.ready;
      for (const p of prompts) alone.push((await complete(one.url, p)).text);
    } finally {
      await one.close(0);
    }
    const { server, port } = await startServer(path, { minMembers: 2, stepHook: () => sleep(15) });
    try {
      member(port);
      assert.equal((await fetch(`${server.url}/health`)).status, 503, 'one member: not placed yet');
      member(port);
      await server.ready;
      assert.equal((await fetch(`${server.url}/health`)).status, 200);
      const before = await view(server.url);
      assert.equal(before.placement?.ranks.length, 2);
      const streams = prompts.map((p) => complete(server.url, p));
      await sleep(200);
      member(port);
      const texts = (await Promise.all(streams)).map((r) => r.text);
      assert.deepEqual(texts, alone);
      await until(
        async () => (await view(server.url)).members.length === 3,
        'the third member is listed',
        60_000,
      );
      // the next step boundary places the model on all three
      assert.equal((await complete(server.url, prompts[0]!)).text, alone[0]);
      const now = await view(server.url);
      assert.deepEqual(
        now.members.map((m) => m.state),
        ['alive', 'alive', 'alive'],
      );
      assert.equal(now.placement?.ranks.length, 3);
    } finally {
      await server.close(0);
      for (const m of members.splice(0)) m.kill('SIGKILL');
    }
  });

  it('too little memory left after a loss: 503 with the sizes, and a member that joins restores service', async () => {
    const pooling = await makePoolingModel(dir);
    const file = GgufModelFile.open(pooling.path);
    let limit: number;
    try {
      const info = {
        config: configFromMetadata(
          (k) => file.meta(k),
          new Map([...file.tensors].map(([n, t]) => [n, t.dims])),
        ),
        tensors: file.tensors,
      };
      const whole = placeModel(info, [{}], { kind: 'tp', provider: 'tcp', contextLength: 128 }).totalBytes;
      const halves = placeModel(info, [{}, {}], { kind: 'tp', provider: 'tcp', contextLength: 128 }).bytes;
      limit = Math.floor((Math.max(...halves) + whole) / 2);
      assert.ok(Math.max(...halves) < limit && limit < whole, 'two members hold the model, one does not');
    } finally {
      file.close();
    }
    const { server, port } = await startServer(pooling.path, { minMembers: 2 });
    try {
      const first = member(port, ['--mem-limit', String(limit)]);
      member(port, ['--mem-limit', String(limit)]);
      await server.ready;
      assert.equal((await complete(server.url, PROMPT, 4)).status, 200);
      first.kill('SIGKILL');
      await until(
        async () => (await fetch(`${server.url}/health`)).status === 503,
        '/health says 503',
        15_000,
      );
      const health = (await (await fetch(`${server.url}/health`)).json()) as { error: { message: string } };
      assert.match(health.error.message, /cannot hold the model: .*needs .* of /);
      const refused = await complete(server.url, PROMPT, 4);
      assert.equal(refused.status, 503, refused.body);
      member(port, ['--mem-limit', String(limit)]);
      await until(
        async () => (await fetch(`${server.url}/health`)).status === 200,
        'a join restores service',
        60_000,
      );
      assert.equal((await complete(server.url, PROMPT, 4)).status, 200);
    } finally {
      await server.close(0);
      for (const m of members.splice(0)) m.kill('SIGKILL');
    }
  });
});
