// A member lost while greedy streams decode on node processes whose shards run on the GPU
// (`--kernels webgpu`): the coordinator re-places the model on the two survivors, which load
// their new shards on their GPUs, every sequence is replayed, and each stream's text equals
// the same prompt served alone by one CPU process. Runs on Mesa's lavapipe where no GPU
// exists; skips with the reason where no adapter is found.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ApiServer } from '../../src/api/http-server.js';
import { loadClusterServedModel } from '../../src/api/cluster-served-model.js';
import { clusterView, startTestServer } from '../../src/api/testing.js';
import { streamCompletion, type StreamedCompletion } from '../../src/api/sse-reader.js';
import { probeAdapter } from '../../src/kernels/webgpu/index.js';
import { makeTestModelFile, PROMPT } from './parallel-models.js';

const probe = await probeAdapter();
const skip = probe.found ? false : `no WebGPU adapter here: ${probe.reason}`;
const prompts = Array.from({ length: 2 }, (_, i) => PROMPT.map((t) => ((t + 53 * i) % 500) + 3));
const MAX_TOKENS = 16;

async function stream(url: string, prompt: number[]): Promise<StreamedCompletion> {
  const r = await streamCompletion(
    url,
    { prompt, max_tokens: MAX_TOKENS, temperature: 0 },
    { signal: AbortSignal.timeout(120_000) },
  );
  assert.equal(r.status, 200);
  assert.equal(r.error, undefined, `no error event (${r.error})`);
  return r;
}

describe('GPU nodes: serving survives a lost member', { skip, timeout: 300_000 }, () => {
  let dir = '';
  let path = '';
  const alone: string[] = [];
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tandem-webgpu-recover-'));
    path = await makeTestModelFile(dir, 'llama', 'llama', 'q8_0');
    const one = await startTestServer(path, { slots: 1 });
    try {
      await one.ready;
      for (const p of prompts) alone.push((await stream(one.url, p)).text);
    } finally {
      await one.close(0);
    }
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('SIGKILL of one of 3 tensor-parallel GPU members during 2 greedy streams: the survivors re-load on their GPUs and every stream has the text it has without the failure', async () => {
    let steps = 0;
    const server = await ApiServer.start({
      host: '127.0.0.1',
      port: 0,
      maxBodyBytes: 1 << 20,
      slots: 2,
      maxQueue: 8,
      // slow enough that the member is lost mid-stream
      stepHook: () => sleep(20).then(() => void steps++),
      load: () => loadClusterServedModel(path, { nodes: 3, parallel: 'tp', threads: 1, kernels: 'webgpu' }),
    });
    try {
      await server.ready;
      const before = await clusterView(server.url);
      const victim = before.members[1]?.pid;
      assert.ok(victim, 'the member has a pid');
      const streams = prompts.map((p) => stream(server.url, p));
      const deadline = Date.now() + 60_000;
      while (steps < 2 * 4 && Date.now() < deadline) await sleep(5);
      process.kill(victim, 'SIGKILL');
      const done = await Promise.all(streams);
      assert.deepEqual(
        done.map((s) => s.text),
        alone,
      );
      const view = await clusterView(server.url);
      assert.deepEqual(
        view.members.map((m) => m.state),
        ['alive', 'dead', 'alive'],
      );
      assert.equal(view.replacements, 1);
      assert.equal(view.placement?.ranks.length, 2);
      // the healed cluster serves the next request as before
      assert.equal((await stream(server.url, prompts[0]!)).text, alone[0]);
    } finally {
      await server.close(0);
    }
  });
});
