import { after, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { tempModel } from '../engine/testing/temp-model.js';
import type { ApiServer } from './http-server.js';
import { startTestServer } from './testing.js';

/*
 * A mixture of experts served from this process: /metrics shows each expert's routed tokens
 * per layer, and a completion moves them by exactly its forwarded tokens times the experts
 * per token (every prompt token and every generated one but the last passes every layer).
 */

const path = tempModel('tandem-expert-metrics-', { arch: 'qwen3moe', shape: 'tiny', type: 'q8_0', seed: 6 });
let server: ApiServer;

// made in the first test: the generated model exists only once the tests run (tempModel)
beforeEach(async () => {
  if (server) return;
  server = await startTestServer(path(), { name: 'moe', slots: 1, maxQueue: 4 });
  await server.ready;
});
after(() => server?.close(0));

async function routed(): Promise<Map<string, number>> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const out = new Map<string, number>();
  for (const m of text.matchAll(/^tandem:expert_routed_tokens\{layer="(\d+)",expert="(\d+)"\} (\S+)$/gm))
    out.set(`${m[1]}/${m[2]}`, Number(m[3]));
  return out;
}

test('/metrics: experts routed tokens move by exactly the forwarded tokens x experts per token, in every layer', async () => {
  const before = await routed();
  assert.ok(before.size > 0, 'the MoE model exports its experts');
  const res = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'moe', prompt: 'Once upon a time', max_tokens: 6, temperature: 0 }),
  });
  assert.equal(res.status, 200);
  const { usage } = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
  const after = await routed();
  const layers = new Set([...after.keys()].map((k) => k.split('/')[0]));
  const used = 2; // the tiny shape's experts per token
  for (const layer of layers) {
    let moved = 0;
    for (const [k, v] of after) if (k.startsWith(`${layer}/`)) moved += v - (before.get(k) ?? 0);
    assert.equal(moved, (usage.prompt_tokens + usage.completion_tokens - 1) * used, `layer ${layer}`);
  }
  const shares = (await (await fetch(`${server.url}/metrics`)).text()).match(
    /^tandem:expert_load_share\{.*$/gm,
  );
  assert.ok(shares && shares.length === after.size, 'a recent share per expert and layer');
});
