import { after, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { request, type ClientRequest } from 'node:http';
import { tempModel } from '../engine/testing/temp-model.js';
import type { ApiServer } from './http-server.js';
import type { DashboardSnapshot } from './dashboard-feed.js';
import { startTestServer, until } from './testing.js';

/*
 * GET /v1/dashboard/events read by a raw HTTP client: the snapshot arrives at once and each
 * second, its counter moves by exactly the tokens a request generated, and a client that goes
 * away leaves no subscription and no timer behind.
 */

const path = tempModel('tandem-dashboard-', { arch: 'qwen2', shape: 'tiny', type: 'q8_0', seed: 7 });
const KEY = 'dashboard-key';
const auth = { authorization: `Bearer ${KEY}` };
let server: ApiServer;

beforeEach(async () => {
  if (server) return;
  server = await startTestServer(path(), { name: 'tiny', apiKey: KEY });
  await server.ready;
});
after(async () => {
  await server?.close(0);
});

/** An open event stream: `next()` gives the next snapshot (bounded wait), `close()` hangs up. */
interface Events {
  status: number;
  contentType: string;
  next(timeoutMs?: number): Promise<DashboardSnapshot>;
  close(): void;
}

function openEvents(headers: Record<string, string>): Promise<Events> {
  return new Promise((resolve, reject) => {
    const req: ClientRequest = request(`${server.url}/v1/dashboard/events`, { headers }, (res) => {
      const queue: DashboardSnapshot[] = [];
      let wake = (): void => {};
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
        let end: number;
        while ((end = text.indexOf('\n\n')) >= 0) {
          const event = text.slice(0, end);
          text = text.slice(end + 2);
          if (event.startsWith('data: ')) queue.push(JSON.parse(event.slice(6)) as DashboardSnapshot);
        }
        wake();
      });
      res.on('error', () => {});
      resolve({
        status: res.statusCode ?? 0,
        contentType: String(res.headers['content-type']),
        async next(timeoutMs = 5000) {
          const end = Date.now() + timeoutMs;
          while (queue.length === 0) {
            if (Date.now() > end) throw new Error(`no dashboard event within ${timeoutMs} ms`);
            await new Promise<void>((r) => {
              wake = r;
              setTimeout(r, 50);
            });
          }
          return queue.shift() as DashboardSnapshot;
        },
        close: () => req.destroy(),
      });
    });
    req.on('error', reject);
    req.end();
  });
}

test('dashboard events: the key is needed, as on every API route', async () => {
  const res = await fetch(`${server.url}/v1/dashboard/events`);
  assert.equal(res.status, 401);
  await res.text();
});

test('dashboard events: the first snapshot arrives at once with every field, then one a second', async () => {
  const events = await openEvents(auth);
  try {
    assert.equal(events.status, 200);
    assert.match(events.contentType, /^text\/event-stream/);
    const first = await events.next(2000);
    assert.equal(first.status, 'ready');
    assert.equal(first.model, 'tiny');
    for (const field of ['generated_tokens_total', 'prompt_tokens_total', 'tokens_per_s', 'queue_depth'])
      assert.equal(typeof first[field as keyof DashboardSnapshot], 'number', field);
    assert.equal(first.slots, 4);
    assert.equal(first.running, 0);
    assert.ok(Array.isArray(first.recent_ttfts));
    assert.equal(first.cluster?.members.length, 1);
    assert.equal(first.cluster?.members[0]?.state, 'alive');
    assert.equal(first.cluster?.members[0]?.pid, process.pid);
    assert.match(first.cluster?.placement?.ranks[0]?.holds ?? '', /layers 0-/);
    const second = await events.next(3000);
    assert.ok(second.at_ms - first.at_ms >= 900, `${second.at_ms - first.at_ms} ms between snapshots`);
  } finally {
    events.close();
  }
});

test('dashboard events: a request served moves the token counter by exactly its tokens, and its TTFT shows', async () => {
  const events = await openEvents(auth);
  try {
    const before = await events.next(2000);
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 7, temperature: 0 }),
    });
    const body = (await res.json()) as { usage: { completion_tokens: number; prompt_tokens: number } };
    assert.equal(res.status, 200);
    let after = before;
    const end = Date.now() + 5000;
    while (after.at_ms <= before.at_ms || after.recent_ttfts.length === before.recent_ttfts.length) {
      assert.ok(Date.now() < end, 'no snapshot after the request within 5000 ms');
      after = await events.next(3000);
    }
    assert.equal(after.generated_tokens_total - before.generated_tokens_total, body.usage.completion_tokens);
    assert.equal(after.prompt_tokens_total - before.prompt_tokens_total, body.usage.prompt_tokens);
    assert.equal(after.recent_ttfts.length, before.recent_ttfts.length + 1);
    assert.ok((after.recent_ttfts.at(-1)?.ttft_s ?? -1) > 0);
  } finally {
    events.close();
  }
});

test('dashboard events: a client that hangs up leaves no subscription and no timer', async () => {
  const events = await openEvents(auth);
  await events.next(2000);
  assert.equal(server.dashboard.subscribers, 1);
  assert.equal(server.dashboard.ticking, true);
  events.close();
  await until(() => server.dashboard.subscribers === 0, 'the stream being dropped', 3000);
  assert.equal(server.dashboard.ticking, false);
});

test('GET /v1/cluster: a model served in this process is a cluster of one member holding every layer', async () => {
  const res = await fetch(`${server.url}/v1/cluster`, { headers: auth });
  assert.equal(res.status, 200);
  const view = (await res.json()) as NonNullable<DashboardSnapshot['cluster']>;
  assert.equal(view.members.length, 1);
  assert.equal(view.members[0]?.pid, process.pid);
  assert.equal(view.placements, 1);
  assert.equal(view.placement?.ranks.length, 1);
});

test('dashboard events: closing the server ends an open stream', async () => {
  const other = await startTestServer(path(), { name: 'tiny' });
  await other.ready;
  const req = request(`${other.url}/v1/dashboard/events`);
  const ended = new Promise<string>((resolve) => {
    req.on('response', (res) => {
      res.resume();
      res.on('close', () => resolve('closed'));
    });
    req.on('error', () => resolve('closed'));
  });
  req.end();
  await until(() => other.dashboard.subscribers === 1, 'the stream opening', 3000);
  await other.close(0);
  assert.equal(await Promise.race([ended, new Promise((r) => setTimeout(() => r('open'), 3000))]), 'closed');
  assert.equal(other.dashboard.ticking, false);
});
