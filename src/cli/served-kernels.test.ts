import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { ApiServer } from '../api/index.js';
import { tempModel } from '../engine/testing/temp-model.js';
import { probeAdapter } from '../kernels/webgpu/index.js';
import { loadKernelsServedModel } from './served-kernels.js';
import { runTandem } from './testing.js';

/**
 * `tandem serve --kernels webgpu`: the scheduler's prefill and batched decode through the GPU
 * forward pass. Batch invariance: streams decoded together in one batched step get exactly
 * the tokens each gets alone (a batch of one). On lavapipe where no GPU exists; skipped with
 * the reason where no adapter is found.
 */
const probe = await probeAdapter();
const skip = probe.found ? false : `no WebGPU adapter here: ${probe.reason}`;
const path = tempModel('tandem-serve-webgpu-', { arch: 'qwen2moe', shape: 'tiny', type: 'q8_0', seed: 21 });
let server: ApiServer | undefined;
after(async () => server?.close(0));

async function complete(prompt: number[]): Promise<string> {
  const res = await fetch(`${server!.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: 8, temperature: 0 }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  const body = (await res.json()) as { choices: { text: string }[]; usage: { completion_tokens: number } };
  assert.equal(body.usage.completion_tokens, 8);
  return body.choices[0]!.text;
}

test(
  'serve --kernels webgpu: 4 concurrent greedy streams (one batched decode step) each equal its stream alone',
  { skip },
  async () => {
    const lines: string[] = [];
    server = await ApiServer.start({
      host: '127.0.0.1',
      port: 0,
      maxBodyBytes: 1 << 20,
      slots: 4,
      maxQueue: 16,
      load: () => loadKernelsServedModel(path(), 'webgpu', { context: 96, log: (l) => lines.push(l) }),
    });
    await server.ready;
    assert.ok(
      lines.some((l) => /webgpu kernels on/.test(l)),
      lines.join('\n'),
    );
    const prompts = Array.from({ length: 4 }, (_, i) =>
      Array.from({ length: 2 + i * 9 }, (_, j) => 3 + ((i * 131 + j * 17) % 4000)),
    );
    const together = await Promise.all(prompts.map(complete));
    for (const [i, prompt] of prompts.entries())
      assert.equal(together[i], await complete(prompt), `prompt ${i}`);
  },
);

test('tandem serve --kernels: refused beside --hosts (nodes there choose their own); a bad choice names the choices', () => {
  const nodes = runTandem([
    'serve',
    '/nonexistent.gguf',
    '--kernels',
    'webgpu',
    '--hosts',
    '/nonexistent-hosts',
  ]);
  assert.notEqual(nodes.code, 0);
  assert.match(nodes.stderr, /--kernels applies to a model served from this process or its local nodes/);
  const bad = runTandem(['serve', '/nonexistent.gguf', '--kernels', 'cuda']);
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /webgpu/);
});
