import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { ApiServer } from '../../src/api/http-server.js';
import { loadClusterServedModel, type ClusterServeOptions } from '../../src/api/cluster-served-model.js';
import { loadServedModel, type ServedModel } from '../../src/api/served-model.js';
import { startTestServer } from '../../src/api/testing.js';
import { streamCompletion } from '../../src/api/sse-reader.js';
import { tandemBin } from '../../src/cli/testing.js';
import type { ClusterView } from '../../src/cluster/index.js';
import { isTandemError } from '../../src/errors/index.js';
import { makeTestModelFile, PROMPT } from './parallel-models.js';

/*
 * `tandem serve` over local node processes: the scheduler drives every forward on the nodes
 * (one batch per decode step, a prompt piece and the running streams' decode rows in one
 * mixed step), and each greedy stream equals the same prompt served alone by one process. The model: a 4-layer Q8_0 llama with a large weight spread, so greedy tokens
 * move (test/e2e/parallel-models.ts).
 */

let dir = '';
let path = '';
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tandem-serve-nodes-'));
  path = await makeTestModelFile(dir, 'llama', 'llama', 'q8_0');
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** The model the last cluster server loaded. */
let lastServed: ServedModel | undefined;

function startClusterServer(o: Omit<ClusterServeOptions, 'threads'>, slots: number): Promise<ApiServer> {
  return ApiServer.start({
    host: '127.0.0.1',
    port: 0,
    maxBodyBytes: 1 << 20,
    slots,
    maxQueue: 64,
    load: async () =>
      (lastServed = await loadClusterServedModel(path, { threads: 1, sequences: slots, ...o })),
  });
}

/** The prompt piece a model takes beside running streams (the scheduler's default). */
function mixedChunk(served: ServedModel | undefined): number | undefined {
  return (served?.model as { mixedChunk?: number } | undefined)?.mixedChunk;
}

/** Eight distinct prompts of token ids. */
const prompts = Array.from({ length: 8 }, (_, i) => PROMPT.map((t) => ((t + 37 * i) % 500) + 3));
/**
 * Four prompts of 70 tokens: beside running streams each is prefilled in pieces of the mixed
 * chunk (32 then 38 with x86 VNNI kernels, else 30 then 40), alone in one piece.
 */
const longPrompts = Array.from({ length: 4 }, (_, i) =>
  Array.from({ length: 70 }, (_, j) => ((13 * j + 41 * i) % 500) + 3),
);

/** A conversation's two prompts: the second re-sends the first and adds to it. */
const conversation = ((base: number[]) => [
  base,
  [...base, ...base.slice(0, 25).map((t) => ((t * 7) % 500) + 3)],
])(Array.from({ length: 60 }, (_, j) => ((29 * j + 11) % 500) + 3));

/** A greedy completion of token ids (not streamed): its text and the prompt tokens it took from a slot. */
async function completed(
  url: string,
  prompt: number[],
  maxTokens: number,
): Promise<{ text: string; cached: number }> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0 }),
    signal: AbortSignal.timeout(60_000),
  });
  assert.equal(res.status, 200);
  const body = (await res.json()) as {
    choices: { text: string }[];
    usage: { prompt_tokens_details?: { cached_tokens: number } };
  };
  return { text: body.choices[0]!.text, cached: body.usage.prompt_tokens_details?.cached_tokens ?? 0 };
}

/** A greedy completion with token 7 pushed up by logit_bias: its rows need whole logits, not the argmax alone. */
async function biased(url: string, prompt: number[]): Promise<string> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: 12, temperature: 0, logit_bias: { 7: 8 } }),
    signal: AbortSignal.timeout(60_000),
  });
  assert.equal(res.status, 200);
  return ((await res.json()) as { choices: { text: string }[] }).choices[0]!.text;
}

/** Serving steps that carried a prompt piece and decode rows in one request, from /v1/cluster. */
async function mixedSteps(url: string): Promise<number> {
  const view = (await (await fetch(`${url}/v1/cluster`)).json()) as ClusterView;
  return view.mixed_steps ?? 0;
}

interface Completion {
  text: string;
  finish: string | undefined;
  tokens: number | undefined;
}

/** A streamed greedy completion of token ids: its text, finish reason and usage. */
async function streamed(url: string, prompt: number[], maxTokens: number): Promise<Completion> {
  const r = await streamCompletion(
    url,
    { prompt, max_tokens: maxTokens, temperature: 0, stream_options: { include_usage: true } },
    { signal: AbortSignal.timeout(60_000) },
  );
  assert.equal(r.status, 200);
  assert.equal(r.error, undefined, 'no error event');
  assert.ok(r.done, 'the stream ends with [DONE]');
  return { text: r.text, finish: r.finishReason, tokens: r.completionTokens };
}

/**
 * A greedy completion with each token's logprob and top 2 (not streamed): a row whose
 * logits cross the wire whole, where a plain greedy row's token id comes alone.
 */
async function withLogprobs(url: string, prompt: number[], maxTokens: number): Promise<unknown> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0, logprobs: 2 }),
    signal: AbortSignal.timeout(60_000),
  });
  assert.equal(res.status, 200);
  const body = (await res.json()) as { choices: { text: string; logprobs: unknown }[] };
  return body.choices[0];
}

describe('serve over nodes', { timeout: 240_000 }, () => {
  let alone: Completion[] = [];
  let aloneLong: Completion[] = [];
  let aloneLogprobs: unknown[] = [];
  let aloneConversation: string[] = [];
  let aloneBiased = '';
  let aloneChunk: number | undefined;

  before(async () => {
    const served = await loadServedModel(path, { threads: 1 });
    aloneChunk = mixedChunk(served);
    await served.close();
    const one = await startTestServer(path, { slots: 1 });
    try {
      await one.ready;
      alone = [];
      for (const p of prompts) alone.push(await streamed(one.url, p, 12));
      aloneLong = [];
      for (const p of longPrompts) aloneLong.push(await streamed(one.url, p, 12));
      aloneLogprobs = [];
      for (const p of prompts.slice(0, 2)) aloneLogprobs.push(await withLogprobs(one.url, p, 12));
      aloneConversation = [];
      for (const p of conversation) aloneConversation.push((await completed(one.url, p, 12)).text);
      aloneBiased = await biased(one.url, prompts[0]!);
    } finally {
      await one.close(0);
    }
    assert.ok(new Set(alone.map((c) => c.text)).size > 1, 'the prompts give different texts');
  });

  it('tensor parallel on 2 nodes: 8 concurrent greedy streams each equal the prompt served alone by one process', async () => {
    const server = await startClusterServer({ nodes: 2, parallel: 'tp' }, 8);
    try {
      await server.ready;
      // the nodes' kernels set the prompt piece, as one process's kernels set its own
      assert.equal(mixedChunk(lastServed), aloneChunk);
      // greedy rows answered as token ids and logprobs rows as whole logits, in the same steps
      const [together, logprobs] = await Promise.all([
        Promise.all(prompts.map((p) => streamed(server.url, p, 12))),
        Promise.all(prompts.slice(0, 2).map((p) => withLogprobs(server.url, p, 12))),
      ]);
      assert.deepEqual(together, alone);
      assert.deepEqual(logprobs, aloneLogprobs, "logprobs equal one process's");
      const mixed = await mixedSteps(server.url);
      assert.ok(mixed > 0, 'prompts were prefilled beside running streams in mixed steps');
      // long prompts prefilled in pieces, each piece beside the running streams' decode rows
      const long = await Promise.all(longPrompts.map((p) => streamed(server.url, p, 12)));
      assert.deepEqual(long, aloneLong);
      assert.ok((await mixedSteps(server.url)) >= mixed + 4, 'the long prompts ran in mixed steps');
      // a cancelled stream leaves the nodes serving: the next request is answered as before
      const ac = new AbortController();
      const res = await fetch(`${server.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: prompts[0], max_tokens: 100, temperature: 0, stream: true }),
        signal: ac.signal,
      });
      const reader = res.body!.getReader();
      await reader.read();
      ac.abort();
      assert.deepEqual(await streamed(server.url, prompts[1]!, 12), alone[1]);
      // a conversation: the members keep the first prompt's K/V, and the second prefills only what is new
      const first = await completed(server.url, conversation[0]!, 12);
      const second = await completed(server.url, conversation[1]!, 12);
      assert.equal(first.cached, 0);
      assert.ok(
        second.cached >= 40,
        `the second prompt took the first's start from the slot (${second.cached})`,
      );
      assert.deepEqual([first.text, second.text], aloneConversation);
      // a logit_bias row is not greedy: the nodes answer its whole logits, and the bias moves its text
      assert.notEqual(aloneBiased, alone[0]!.text);
      assert.equal(await biased(server.url, prompts[0]!), aloneBiased);
    } finally {
      await server.close(0);
    }
  });

  it('pipeline on 2 nodes: 6 concurrent greedy streams (2 with long prompts) each equal the prompt served alone, and a conversation reuses its slot', async () => {
    const server = await startClusterServer({ nodes: 2, parallel: 'pp', provider: 'tcp' }, 4);
    try {
      await server.ready;
      const together = await Promise.all(
        [...prompts.slice(0, 4), ...longPrompts.slice(0, 2)].map((p) => streamed(server.url, p, 12)),
      );
      assert.deepEqual(together, [...alone.slice(0, 4), ...aloneLong.slice(0, 2)]);
      assert.ok((await mixedSteps(server.url)) > 0, 'prompts were prefilled beside running streams');
      // every stage cuts its layers' K/V back for a reused slot
      const first = await completed(server.url, conversation[0]!, 12);
      const second = await completed(server.url, conversation[1]!, 12);
      assert.ok(second.cached >= 40, `the second prompt took the first's start (${second.cached})`);
      assert.deepEqual([first.text, second.text], aloneConversation);
    } finally {
      await server.close(0);
    }
  });
});

/** Pids of processes whose environment holds `mark` (the serve process's children inherit it). */
function pidsWith(mark: string): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/environ`, 'latin1').includes(mark)) out.push(Number(entry));
    } catch {
      // the process ended, or is not ours to read
    }
  }
  return out;
}

describe('tandem serve --nodes', { timeout: 120_000 }, () => {
  it('serves over 2 local nodes, then SIGTERM stops the nodes and exits 0', async () => {
    const mark = `TANDEM_TEST_MARK=${randomUUID()}`;
    const child = spawn(
      process.execPath,
      [tandemBin, 'serve', path, '--port', '0', '--nodes', '2', '--threads', '1'],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
        env: { ...process.env, TANDEM_TEST_MARK: mark.split('=')[1] },
      },
    );
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no listening line:\n${stderr}`)), 60_000);
        const check = (): void => {
          const m = /listening on (http:\/\/\S+)/.exec(stderr);
          if (m) {
            clearTimeout(timer);
            resolve(m[1] as string);
          }
        };
        child.stderr.on('data', check);
        void exited.then(() => reject(new Error(`serve exited:\n${stderr}`)));
      });
      assert.match(stderr, /starting 2 local node\(s\)/);
      assert.equal(pidsWith(mark).length, 3, 'the server and its 2 nodes run');
      const got = await streamed(url, prompts[2]!, 8);
      assert.equal(got.tokens, 8);
      child.kill('SIGTERM');
      const code = await Promise.race([
        exited,
        new Promise((_, reject) => setTimeout(() => reject(new Error('no exit within 15 s')), 15_000)),
      ]);
      assert.equal(code, 0, stderr);
      const deadline = Date.now() + 5000;
      while (pidsWith(mark).length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      assert.deepEqual(pidsWith(mark), [], 'no node process is left');
    } finally {
      child.kill('SIGKILL');
    }
  });
});

describe('serve over nodes: memory', { timeout: 120_000 }, () => {
  it('placement counts a KV cache for every slot: a limit that holds one slot refuses 8, naming --slots', async () => {
    const need = async (sequences: number): Promise<number> => {
      const e = await loadClusterServedModel(path, {
        nodes: 1,
        threads: 1,
        context: 256,
        memLimit: 1,
        sequences,
      }).then(
        () => assert.fail('a 1-byte limit holds nothing'),
        (err: unknown) => err,
      );
      assert.ok(isTandemError(e, 'PAR_NO_FIT'), String(e));
      return (e.details as { needBytes: number[] }).needBytes[0]!;
    };
    const one = await need(1);
    const eight = await need(8);
    assert.ok(eight > one, `8 slots need more than 1 (${eight} vs ${one})`);
    const memLimit = Math.floor((one + eight) / 2);
    const served = await loadClusterServedModel(path, {
      nodes: 1,
      threads: 1,
      context: 256,
      memLimit,
      sequences: 1,
    });
    await served.close();
    await assert.rejects(
      loadClusterServedModel(path, { nodes: 1, threads: 1, context: 256, memLimit, sequences: 8 }),
      (e) => isTandemError(e, 'PAR_NO_FIT') && /fewer --slots/.test(e.hint) && /8 slots/.test(e.hint),
    );
  });
});
