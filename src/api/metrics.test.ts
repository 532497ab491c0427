import { after, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { tempModel } from '../engine/testing/temp-model.js';
import { createLogger } from '../util/log.js';
import type { ApiServer } from './http-server.js';
import { startTestServer, until } from './testing.js';

/*
 * /metrics scraped before and after known requests (a plain and a streamed completion, a 429,
 * a 400): every counter moves by exactly what was served, every histogram by the requests
 * that reached it; the text parses as Prometheus exposition; the JSON log has a line per
 * request carrying its id, timings and outcome.
 */

const path = tempModel('tandem-metrics-', { arch: 'qwen2', shape: 'tiny', type: 'q8_0', seed: 11 });
const messages = [{ role: 'user', content: 'Count to ten.' }];
let server: ApiServer;
const logLines: string[] = [];
/** While set, every forward waits for it: a request holds its slot until the test opens it. */
let gate: Promise<void> | undefined;

// made in the first test: the generated model exists only once the tests run (tempModel)
beforeEach(async () => {
  if (server) return;
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      logLines.push(
        ...chunk
          .toString()
          .split('\n')
          .filter((l) => l !== ''),
      );
      done();
    },
  });
  server = await startTestServer(path(), {
    name: 'tiny',
    slots: 1,
    maxQueue: 0,
    logger: createLogger('json', sink),
    stepHook: () => gate,
  });
  await server.ready;
});
after(() => server?.close(0));

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$/;

/**
 * The exposition text as sample -> value (`name{labels}` as printed), checking each line's
 * form: `# HELP`/`# TYPE` comments, and samples of a family whose TYPE came before.
 */
function parseExposition(text: string): Map<string, number> {
  const samples = new Map<string, number>();
  const types = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const type = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$/.exec(line);
    if (type) {
      types.set(type[1] as string, type[2] as string);
      continue;
    }
    if (line.startsWith('# HELP ')) continue;
    const m = SAMPLE.exec(line);
    assert.ok(m, `not a Prometheus sample line: ${line}`);
    const [, name, labels = '', value] = m as unknown as [string, string, string | undefined, string];
    const family = name.replace(/_(bucket|sum|count)$/, '');
    assert.ok(types.has(name) || types.get(family) === 'histogram', `${name} has no TYPE before it`);
    const v = Number(value);
    assert.ok(!Number.isNaN(v) || value === 'NaN', `${line}: the value is not a number`);
    samples.set(name + labels, v);
  }
  return samples;
}

async function scrape(): Promise<Map<string, number>> {
  const res = await fetch(`${server.url}/metrics`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  return parseExposition(await res.text());
}

function chat(body: object): Promise<Response> {
  return fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', messages, temperature: 0, ...body }),
  });
}

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

/** A streamed chat's usage and finish reason, read from its events. */
async function streamed(res: Response): Promise<{ usage: Usage; finish: string }> {
  let usage: Usage | undefined;
  let finish = '';
  for (const event of (await res.text()).split('\n\n')) {
    const data = event.replace(/^data: /, '');
    if (data === '' || data === '[DONE]') continue;
    const chunk = JSON.parse(data) as { usage?: Usage | null; choices: { finish_reason: string | null }[] };
    if (chunk.usage) usage = chunk.usage;
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.ok(usage, 'the stream carried its usage');
  return { usage, finish };
}

test('metrics: counters move by exactly the tokens served and the right reasons; histograms by the requests', async () => {
  const before = await scrape();
  const delta = (after: Map<string, number>, sample: string): number =>
    (after.get(sample) ?? 0) - (before.get(sample) ?? 0);

  // a plain completion holds the only slot while a second one is refused with 429
  let open!: () => void;
  gate = new Promise<void>((resolve) => (open = resolve));
  const plain = chat({ max_tokens: 5 });
  await until(
    async () => (await scrape()).get('tandem:num_requests_running') === 1,
    'the first request running',
  );
  const refused = await chat({ max_tokens: 3 });
  assert.equal(refused.status, 429);
  gate = undefined;
  open();
  const plainRes = await plain;
  assert.equal(plainRes.status, 200);
  const a = (await plainRes.json()) as { usage: Usage; choices: { finish_reason: string }[] };

  const b = await streamed(
    await chat({ max_tokens: 6, stream: true, stream_options: { include_usage: true } }),
  );

  const bad = await chat({ max_tokens: -1 });
  assert.equal(bad.status, 400);
  const badCode = ((await bad.json()) as { error: { type: string; code: string } }).error;

  const after = await scrape();
  const served = [a.usage, b.usage];
  const sum = (f: (u: Usage) => number): number => served.reduce((s, u) => s + f(u), 0);
  // the same messages twice: the second prompt's start comes from the slot's cache
  assert.ok(b.usage.prompt_tokens_details.cached_tokens > 0, 'the second prompt reused the first');
  assert.equal(
    delta(after, 'tandem:prompt_tokens_total'),
    sum((u) => u.prompt_tokens - u.prompt_tokens_details.cached_tokens),
  );
  assert.equal(
    delta(after, 'tandem:prompt_tokens_cached_total'),
    sum((u) => u.prompt_tokens_details.cached_tokens),
  );
  assert.equal(
    delta(after, 'tandem:generation_tokens_total'),
    sum((u) => u.completion_tokens),
  );
  for (const reason of ['stop', 'length', 'abort']) {
    const expected = [a.choices[0]?.finish_reason, b.finish].filter((r) => r === reason).length;
    assert.equal(delta(after, `tandem:request_success_total{finished_reason="${reason}"}`), expected, reason);
  }
  assert.equal(delta(after, 'tandem:request_rejected_total{reason="queue_full"}'), 1);
  assert.equal(delta(after, 'tandem:request_errors_total{type="rate_limit_error",code="queue_full"}'), 1);
  assert.equal(delta(after, `tandem:request_errors_total{type="${badCode.type}",code="${badCode.code}"}`), 1);
  const route = '/v1/chat/completions';
  assert.equal(delta(after, `tandem:http_requests_total{route="${route}",status="200"}`), 2);
  assert.equal(delta(after, `tandem:http_requests_total{route="${route}",status="429"}`), 1);
  assert.equal(delta(after, `tandem:http_requests_total{route="${route}",status="400"}`), 1);

  // the two completions that ran reach every timing; the refused and the bad one none
  for (const h of ['time_to_first_token', 'e2e_request_latency', 'request_queue_time'])
    assert.equal(delta(after, `tandem:${h}_seconds_count`), 2, h);
  assert.equal(
    delta(after, 'tandem:inter_token_latency_seconds_count'),
    sum((u) => u.completion_tokens - 1),
  );
  const inf = after.get('tandem:time_to_first_token_seconds_bucket{le="+Inf"}');
  assert.equal(
    inf,
    after.get('tandem:time_to_first_token_seconds_count'),
    'the +Inf bucket holds every request',
  );
  assert.equal(after.get('tandem:num_requests_running'), 0);
  assert.equal(after.get('tandem:num_requests_waiting'), 0);
  assert.equal(after.get('tandem:num_slots'), 1);

  // one JSON log line per request, with its id (the x-request-id header), timings and outcome
  const lines = logLines
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => l.msg === 'request');
  const byId = new Map(lines.map((l) => [l.id, l]));
  const plainLine = byId.get(plainRes.headers.get('x-request-id'));
  assert.ok(plainLine, 'the plain completion has a line under its x-request-id');
  assert.equal(plainLine.outcome, a.choices[0]?.finish_reason);
  assert.equal(plainLine.route, `POST ${route}`);
  assert.equal(plainLine.status, 200);
  assert.equal(plainLine.prompt_tokens, a.usage.prompt_tokens);
  assert.equal(plainLine.completion_tokens, a.usage.completion_tokens);
  for (const t of ['queue_ms', 'ttft_ms', 'total_ms']) assert.equal(typeof plainLine[t], 'number', t);
  assert.ok((plainLine.ttft_ms as number) <= (plainLine.total_ms as number));
  assert.equal(plainLine.level, 'info');
  assert.match(String(plainLine.time), /^\d{4}-\d\d-\d\dT/);
  const refusedLine = byId.get(refused.headers.get('x-request-id'));
  assert.deepEqual(
    [refusedLine?.outcome, refusedLine?.status, refusedLine?.error, refusedLine?.ttft_ms],
    ['rejected', 429, 'queue_full', undefined],
  );
  const badLine = byId.get(bad.headers.get('x-request-id'));
  assert.deepEqual([badLine?.outcome, badLine?.status, badLine?.error], ['error', 400, badCode.code]);
  const outcomes = lines.filter((l) => l.route === `POST ${route}`).map((l) => l.outcome);
  // in the order they ended: the refusal while the plain one ran
  assert.deepEqual(outcomes, ['rejected', a.choices[0]?.finish_reason, b.finish, 'error']);
  assert.ok(!lines.some((l) => l.route === 'GET /metrics'), 'scrapes are logged at debug only');
});

test('metrics: the cluster source fills the member and link metrics; a figure it leaves out is not exported', async () => {
  // a loaded server on one machine is its own single member
  let text = await (await fetch(`${server.url}/metrics`)).text();
  const member = /^tandem:member_memory_used_bytes\{member="([^"]+)"\} (\d+)$/m.exec(text);
  assert.ok(member && Number(member[2]) > 0, 'the single process reports its memory');
  assert.match(text, /^tandem:cluster_members\{state="ready"\} 1$/m);
  assert.doesNotMatch(text, /tandem:link_|tandem:cluster_placements_total|heartbeat/);

  let lost = false;
  server.metrics.setClusterSource({
    snapshot: () => ({
      members: [
        {
          id: 'mac-a',
          state: 'ready',
          memoryUsedBytes: 8e9,
          memoryLimitBytes: 16e9,
          computeShare: 0.7,
          commShare: 0.3,
          heartbeatAgeS: 0.5,
        },
        { id: 'mac-b', state: lost ? 'lost' : 'ready', heartbeatAgeS: lost ? 4 : 0.4 },
      ],
      links: [
        {
          member: 'mac-a',
          peer: 'mac-b',
          kind: 'thunderbolt',
          bytesSent: 1000,
          bytesReceived: 2000,
          latencyS: 0.00002,
        },
      ],
      placements: lost ? 2 : 1,
      replacements: lost ? 1 : 0,
    }),
  });
  try {
    const s = parseExposition(await (await fetch(`${server.url}/metrics`)).text());
    assert.equal(s.get('tandem:cluster_members{state="ready"}'), 2);
    assert.equal(s.get('tandem:member_memory_used_bytes{member="mac-a"}'), 8e9);
    assert.equal(s.get('tandem:member_memory_limit_bytes{member="mac-a"}'), 16e9);
    assert.equal(s.get('tandem:member_compute_share{member="mac-a"}'), 0.7);
    assert.equal(s.get('tandem:member_comm_share{member="mac-a"}'), 0.3);
    assert.equal(s.get('tandem:member_heartbeat_age_seconds{member="mac-b"}'), 0.4);
    assert.equal(s.has('tandem:member_memory_used_bytes{member="mac-b"}'), false, 'not given, not a fake 0');
    assert.equal(
      s.has(`tandem:member_memory_used_bytes{member="${member[1]}"}`),
      false,
      'the source replaced',
    );
    const link = 'member="mac-a",peer="mac-b",kind="thunderbolt"';
    assert.equal(s.get(`tandem:link_sent_bytes_total{${link}}`), 1000);
    assert.equal(s.get(`tandem:link_received_bytes_total{${link}}`), 2000);
    assert.equal(s.get(`tandem:link_latency_seconds{${link}}`), 0.00002);
    assert.equal(s.has(`tandem:link_bandwidth_bytes_per_second{${link}}`), false);
    assert.equal(s.get('tandem:cluster_placements_total'), 1);
    assert.equal(s.get('tandem:cluster_replacements_total'), 0);
    assert.equal(s.has('tandem:cluster_stream_resumes_total'), false);

    lost = true;
    const t = parseExposition(await (await fetch(`${server.url}/metrics`)).text());
    assert.equal(t.get('tandem:cluster_members{state="ready"}'), 1);
    assert.equal(t.get('tandem:cluster_members{state="lost"}'), 1);
    assert.equal(t.get('tandem:cluster_replacements_total'), 1);
    assert.equal(t.get('tandem:member_heartbeat_age_seconds{member="mac-b"}'), 4);
  } finally {
    server.metrics.setClusterSource(undefined);
  }
  text = await (await fetch(`${server.url}/metrics`)).text();
  assert.doesNotMatch(text, /tandem:cluster_|tandem:member_|tandem:link_/, 'no source, no cluster metrics');
});
