import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ApiServer } from '../../src/api/http-server.js';
import { loadClusterServedModel } from '../../src/api/cluster-served-model.js';
import { clusterView, metric, startTestServer } from '../../src/api/testing.js';
import { streamCompletion, type StreamedCompletion } from '../../src/api/sse-reader.js';
import { makeTestModelFile, PROMPT } from './parallel-models.js';

/*
 * A member lost while streams run: the coordinator re-places the model on the survivors,
 * replays every sequence (one of them a prompt that reused another's start in its slot), and
 * the streams go on. With temperature 0 each text equals the
 * same prompt served alone by one process (tensor parallel gives one node's tokens on any
 * number of nodes, test/e2e/parallel-cluster.test.ts).
 */

let dir = '';
let path = '';
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tandem-serve-recover-'));
  path = await makeTestModelFile(dir, 'llama', 'llama', 'q8_0');
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** A first turn whose K/V stays in its slot: prompts[0] re-sends it and adds to it. */
const firstTurn = Array.from({ length: 40 }, (_, j) => ((31 * j + 7) % 500) + 3);
/** Another conversation's first turn, idle in its slot while the member is lost; then its second turn. */
const otherTurn = Array.from({ length: 36 }, (_, j) => ((17 * j + 5) % 500) + 3);
const otherNext = [...otherTurn, ...PROMPT.map((t) => t + 1), ...PROMPT.map((t) => t + 2)];
const prompts = [
  [...firstTurn, ...PROMPT],
  ...Array.from({ length: 3 }, (_, i) => PROMPT.map((t) => ((t + 53 * (i + 1)) % 500) + 3)),
];
const MAX_TOKENS = 24;

async function stream(url: string, prompt: number[]): Promise<StreamedCompletion> {
  const r = await streamCompletion(
    url,
    { prompt, max_tokens: MAX_TOKENS, temperature: 0, stream_options: { include_usage: true } },
    { signal: AbortSignal.timeout(90_000) },
  );
  assert.equal(r.status, 200);
  assert.equal(r.error, undefined, `no error event (${r.error})`);
  return r;
}

describe('serving survives a lost member', { timeout: 240_000 }, () => {
  let alone: string[] = [];
  let aloneOther = '';

  before(async () => {
    const one = await startTestServer(path, { slots: 1 });
    try {
      await one.ready;
      alone = [];
      for (const p of prompts) alone.push((await stream(one.url, p)).text);
      aloneOther = (await stream(one.url, otherNext)).text;
    } finally {
      await one.close(0);
    }
  });

  for (const signal of ['SIGKILL', 'SIGSTOP'] as const) {
    it(`${signal} of one of 3 tensor-parallel members during 4 greedy streams: every stream completes with the text it has without the failure`, async (t) => {
      let steps = 0;
      const server = await ApiServer.start({
        host: '127.0.0.1',
        port: 0,
        maxBodyBytes: 1 << 20,
        slots: 5,
        maxQueue: 8,
        // slow enough that the member is lost mid-stream
        stepHook: () => sleep(20).then(() => void steps++),
        load: () => loadClusterServedModel(path, { nodes: 3, parallel: 'tp', threads: 1 }),
      });
      let victim: number | undefined;
      try {
        await server.ready;
        const before = await clusterView(server.url);
        assert.deepEqual(
          before.members.map((m) => m.state),
          ['alive', 'alive', 'alive'],
        );
        // the first turn runs alone; the streams begin with the turn that re-sends it, so the
        // slot it takes is cut back to the first turn's start, and the replay must rebuild that
        await stream(server.url, firstTurn);
        // another conversation's first turn takes an empty slot and stays there, idle, through the loss
        await stream(server.url, otherTurn);
        steps = 0;
        const streams = prompts.map((p) => stream(server.url, p));
        const deadline = Date.now() + 30_000;
        while (steps < 4 * 6 && Date.now() < deadline) await sleep(5);
        victim = before.members[1]?.pid ?? undefined;
        assert.ok(victim, 'the member has a pid');
        const killedAt = performance.now();
        process.kill(victim, signal);
        const done = await Promise.all(streams);
        assert.deepEqual(
          done.map((s) => s.text),
          alone,
        );
        assert.ok(done.every((s) => s.completionTokens === MAX_TOKENS));
        assert.ok(
          (await metric(server.url, 'tandem:prompt_tokens_cached_total')) >= 30,
          "the second turn took the first turn's start from its slot",
        );
        const view = await clusterView(server.url);
        const replaced = view.events.find((e) => e.kind === 'replaced')?.atMs ?? NaN;
        const killedAtMs = Date.now() - (performance.now() - killedAt);
        const resumed = Math.min(
          ...done.map((s) => s.chunkTimes.find((x) => x > killedAt + (replaced - killedAtMs)) ?? Infinity),
        );
        t.diagnostic(
          `${signal}: re-placed ${(replaced - killedAtMs).toFixed(0)} ms and first token on the survivors ${(resumed - killedAt).toFixed(0)} ms after the signal`,
        );
        assert.deepEqual(
          view.members.map((m) => m.state),
          ['alive', 'dead', 'alive'],
        );
        assert.equal(view.replacements, 1);
        assert.equal(await metric(server.url, 'tandem:cluster_members{state="dead"}'), 1);
        assert.equal(await metric(server.url, 'tandem:cluster_members{state="alive"}'), 2);
        assert.equal(view.placement?.ranks.length, 2);
        // the healed cluster serves the next request as before
        assert.equal((await stream(server.url, prompts[0]!)).text, alone[0]);
        // the idle slot's prompt, filled on the survivors only now that a turn reuses it
        const cachedBefore = await metric(server.url, 'tandem:prompt_tokens_cached_total');
        assert.equal((await stream(server.url, otherNext)).text, aloneOther);
        assert.equal(
          (await metric(server.url, 'tandem:prompt_tokens_cached_total')) - cachedBefore,
          otherTurn.length,
          "the second turn took the first turn's start from the idle slot",
        );
        assert.equal((await fetch(`${server.url}/health`)).status, 200);
      } finally {
        if (victim !== undefined && signal === 'SIGSTOP') process.kill(victim, 'SIGCONT');
        await server.close(0);
      }
    });
  }
});
