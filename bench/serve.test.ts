import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runTandem, tempModel } from '../src/cli/testing.js';
import { prefillBound, requestPrompts, summarize, table } from './serve.js';

const path = tempModel('tandem-bench-serve-', { arch: 'llama', shape: 'tiny', type: 'q8_0', seed: 1 });

test("bench serve --json: one line per engine and level with the issue's fields, requests = clients x rounds", () => {
  const r = runTandem([
    'bench',
    'serve',
    path(),
    '--threads',
    '1',
    '--concurrency',
    '1,2',
    '--prompt-tokens',
    '8',
    '--max-tokens',
    '4',
    '--rounds',
    '2',
    '--anchors',
    '--json',
  ]);
  assert.equal(r.code, 0, r.stderr);
  const lines = r.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number | string>);
  assert.deepEqual(
    lines.map((l) => [l.engine, l.concurrency, l.requests]),
    [
      ['tandem', 1, 2],
      ['tandem', 2, 4],
      ['llama.cpp', 1, 2],
      ['llama.cpp', 2, 4],
    ],
  );
  for (const l of lines) {
    assert.deepEqual(Object.keys(l), [
      'engine',
      'concurrency',
      'requests',
      'ttft_ms_p50',
      'ttft_ms_p99',
      'itl_ms_p50',
      'itl_ms_p99',
      'tok_s_total',
      'tok_s_per_stream',
    ]);
    assert.ok(
      (l.tok_s_total as number) > 0 && (l.tok_s_per_stream as number) > 0 && (l.ttft_ms_p50 as number) > 0,
      JSON.stringify(l),
    );
    assert.ok((l.ttft_ms_p99 as number) >= (l.ttft_ms_p50 as number));
  }
  const bad = runTandem(['bench', 'serve', path(), '--concurrency', '1,x']);
  assert.equal(bad.code, 3);
  assert.match(bad.stderr, /--concurrency item 'x'/);
  const piece = runTandem(['bench', 'serve', path(), '--prefill-chunk', '4']);
  assert.equal(piece.code, 3);
  assert.match(piece.stderr, /--prefill-chunk must be an integer in 12\.\.1024, got 4/);
});

test('bench serve --repeat: the levels run alternated that many times, one line each (its best run)', () => {
  const args = ['bench', 'serve', path(), '--threads', '1', '--concurrency', '2,1', '--prompt-tokens', '8'];
  const r = runTandem([...args, '--max-tokens', '3', '--rounds', '1', '--repeat', '2']);
  assert.equal(r.code, 0, r.stderr);
  // the progress lines: one per run, in the alternated order
  assert.deepEqual(
    [...r.stderr.matchAll(/tandem, concurrency (\d+):/g)].map((m) => Number(m[1])),
    [2, 1, 2, 1],
  );
  const rows = r.stdout.trim().split('\n').slice(1);
  assert.deepEqual(
    rows.map((l) => l.trim().split(/\s+/).slice(0, 3)),
    [
      ['tandem', '2', '2'],
      ['tandem', '1', '1'],
    ],
  );
  const bad = runTandem([...args, '--repeat', '0']);
  assert.equal(bad.code, 3);
  assert.match(bad.stderr, /--repeat must be an integer in 1\.\.20, got 0/);
});

test("summarize: TTFT from each request's start to its first token, gaps between tokens, tokens over wall time", () => {
  const row = summarize(
    'tandem',
    2,
    [
      { startMs: 0, tokenMs: [10, 12, 14], endMs: 20, tokens: 3 },
      { startMs: 5, tokenMs: [35, 36], endMs: 45, tokens: 2 },
    ],
    50,
  );
  assert.deepEqual(row, {
    engine: 'tandem',
    concurrency: 2,
    requests: 2,
    ttft_ms_p50: 10,
    ttft_ms_p99: 30,
    itl_ms_p50: 2,
    itl_ms_p99: 2,
    tok_s_total: 100,
    tok_s_per_stream: 100,
  });
  // one long pause among short gaps: p50 is a short gap, p99 the pause
  const paused = summarize(
    'tandem',
    1,
    [{ startMs: 0, tokenMs: [5, 6, 7, 8, 48], endMs: 50, tokens: 5 }],
    50,
  );
  assert.deepEqual([paused.itl_ms_p50, paused.itl_ms_p99], [1, 40]);
});

test('requestPrompts: each request its own prompt from the first token on, the rest as the base, ids in range', () => {
  const base = [500, 17, 3, 499, 42];
  const prompts = requestPrompts(base, 600);
  assert.equal(new Set(prompts.map((p) => p[0])).size, 498, 'first tokens cycle through ids 3..500');
  assert.deepEqual(prompts[0], base);
  for (const p of prompts) {
    assert.deepEqual(p.slice(1), base.slice(1));
    assert.ok((p[0] as number) >= 3 && (p[0] as number) <= 500, `first token ${p[0]}`);
  }
  const warm = requestPrompts(base, 1, 4)[0]!;
  assert.ok(!prompts.slice(0, 4).some((p) => p[0] === warm[0]), 'the warm-up prompt is none of the first 4');
});

test("table: each row's total tokens/s against its own engine's concurrency 1", () => {
  const row = (engine: 'tandem' | 'llama.cpp', concurrency: number, tok: number, nodes?: number) => ({
    engine,
    concurrency,
    ...(nodes !== undefined ? { nodes, parallel: 'tp' } : {}),
    requests: concurrency,
    ttft_ms_p50: 1,
    ttft_ms_p99: 1,
    itl_ms_p50: 1,
    itl_ms_p99: 1,
    tok_s_total: tok,
    tok_s_per_stream: tok / concurrency,
  });
  const lines = table([
    row('tandem', 1, 10),
    row('tandem', 4, 25),
    row('llama.cpp', 1, 8),
    row('llama.cpp', 4, 10),
    row('tandem', 8, 30, 2),
  ])
    .trim()
    .split('\n');
  const ratio = (l: string): string => l.trim().split(/\s{2,}/)[8] as string;
  assert.deepEqual(lines.slice(1).map(ratio), ['1.00x', '2.50x', '1.00x', '1.25x', '-']);
});

test('table: the prefill bound C(P + D) / (CP + D) from concurrency 1, with --max-tokens', () => {
  const row = (concurrency: number, ttft: number, itl: number, tok: number) => ({
    engine: 'tandem' as const,
    concurrency,
    requests: concurrency,
    ttft_ms_p50: ttft,
    ttft_ms_p99: ttft,
    itl_ms_p50: itl,
    itl_ms_p99: itl,
    tok_s_total: tok,
    tok_s_per_stream: tok / concurrency,
  });
  // P = 1000 ms, D = 64 x 50 ms = 3200 ms: at 4, 4 x 4200 / (4000 + 3200) = 2.33x
  const one = row(1, 1000, 50, 12);
  assert.equal(prefillBound(one, 4, 65).toFixed(4), ((4 * 4200) / 7200).toFixed(4));
  assert.equal(prefillBound(one, 1, 65), 1, 'concurrency 1 is its own bound');
  // with no prefill time the bound is C; with no decode time it is 1
  assert.equal(prefillBound(row(1, 0, 50, 12), 8, 65), 8);
  assert.equal(prefillBound(row(1, 1000, 50, 12), 8, 1), 1);
  const col = (t: string): string[] =>
    t
      .trim()
      .split('\n')
      .slice(1)
      .map((l) => l.trim().split(/\s{2,}/)[9] as string);
  const rows = [one, row(4, 2500, 60, 25)];
  assert.deepEqual(col(table(rows, 65)), ['-', '2.33x']);
  assert.deepEqual(col(table(rows)), ['-', '-'], 'without --max-tokens there is no D');
});
