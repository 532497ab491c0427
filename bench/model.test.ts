import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../src/errors/index.js';
import { childError, jsonLine, powerNote, table } from './model.js';
import { runTandem, tempModel } from '../src/cli/testing.js';

const path = tempModel('tandem-bench-model-', { arch: 'llama', shape: 'tiny', type: 'q8_0', seed: 1 });

const tandem = (...args: string[]) => runTandem(args);

// The tiny model's context holds 512 positions: the engine's child refuses a 1000-token
// prompt with KV_CONTEXT_FULL, which the parent must report as that error, not as stderr scraps.
const tooLong = [
  'bench',
  'model',
  '--no-llama-cpp',
  '--threads',
  '1',
  '--tokens',
  '2',
  '--prompt-tokens',
  '1000',
];

test('bench model reports a typed error of its child with the same code, message and hint', () => {
  const r = tandem(...tooLong.slice(0, 2), path(), ...tooLong.slice(2));
  assert.equal(r.code, 3, r.stderr); // invalid_usage, the category of KV_CONTEXT_FULL
  assert.equal(
    r.stderr,
    'error [KV_CONTEXT_FULL]: 1000 prompt tokens plus 2 new ones need 1001 positions; the context holds 512\n' +
      "  hint: shorten the prompt or lower --max-tokens (or raise --context up to the model's context length)\n",
  );
  assert.equal(r.stdout, '');
});

test("bench model --json reports the child's typed error as the CLI's JSON error line", () => {
  const r = tandem(...tooLong.slice(0, 2), path(), ...tooLong.slice(2), '--json');
  assert.equal(r.code, 3, r.stderr);
  const { error } = JSON.parse(r.stderr) as { error: Record<string, unknown> };
  assert.equal(error.code, 'KV_CONTEXT_FULL');
  assert.equal(error.category, 'invalid_usage');
  assert.equal(
    error.message,
    '1000 prompt tokens plus 2 new ones need 1001 positions; the context holds 512',
  );
  assert.deepEqual(error.details, {
    promptTokens: 1000,
    maxTokens: 2,
    contextLength: 512,
    used: 0,
    engine: 'tandem',
  });
});

test('childError reads only a well-formed error line with a known code', () => {
  const line = JSON.stringify({
    error: { code: 'MODEL_TENSOR', message: 'm', hint: 'h', details: { a: 1 } },
  });
  const e = childError(`some log\n${line}\n`, 'llama.cpp');
  assert.ok(isTandemError(e, 'MODEL_TENSOR'));
  assert.equal(e.message, 'm');
  assert.equal(e.hint, 'h');
  assert.deepEqual(e.details, { a: 1, engine: 'llama.cpp' });
  assert.equal(childError('TypeError: x\n    at y\n\nNode.js v20.20.2\n', 'tandem'), undefined);
  assert.equal(
    childError(JSON.stringify({ error: { code: 'NO_SUCH_CODE', message: 'm' } }), 'tandem'),
    undefined,
  );
});

test('bench model shows J/token beside tok/s where measured, and says once why not', () => {
  const row = (engine: 'tandem' | 'llama.cpp', extra: object) => ({
    engine,
    threads: 1,
    prefill_tok_s: 100,
    decode_tok_s: 10,
    ttft_ms: 50,
    peak_rss_mb: 20,
    ...extra,
  });
  const measured = [row('tandem', { j_per_token: 0.5 }), row('llama.cpp', { j_per_token: 0.25 })];
  const lines = table(measured, 10).trimEnd().split('\n');
  const head = lines[0]!.split(/\s{2,}/);
  const column = head.indexOf('J/token');
  assert.equal(head[column - 1], 'decode tok/s');
  assert.deepEqual(
    lines.slice(1, 3).map((l) => l.split(/\s{2,}/)[column]),
    ['0.500', '0.250'],
  );
  // the ratio row: only J/token differs between the two rows (twice llama.cpp's)
  assert.match(lines[3]!, /^tandem \/ llama\.cpp .* 2\.00 /);
  assert.equal(JSON.parse(jsonLine(measured[0]!)).j_per_token, 0.5);
  assert.equal(powerNote(measured), undefined);

  const reason = 'no RAPL power counters: /sys/class/powercap does not exist';
  const unmeasured = [row('tandem', { power_reason: reason }), row('llama.cpp', { power_reason: reason })];
  assert.equal(powerNote(unmeasured), `J/token not measured: ${reason}`);
  assert.equal('j_per_token' in JSON.parse(jsonLine(unmeasured[0]!)), false);
  assert.ok(table(unmeasured, 10).split('\n')[1]!.includes(' - '));
});

test('bench model --warmup runs each engine once untimed, then times a run of an emptied cache', () => {
  // a 300-token prompt in a session sized for one run (300 + 4 + 8 positions): a warm-up whose
  // cache were not emptied would leave no room for the timed prefill (KV_CONTEXT_FULL)
  const args = [
    'bench',
    'model',
    path(),
    '--threads',
    '1',
    '--tokens',
    '3',
    '--prompt-tokens',
    '300',
    '--json',
  ];
  const warm = tandem(...args, '--warmup', '4');
  assert.equal(warm.code, 0, warm.stderr);
  const rows = warm.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number | string>);
  assert.deepEqual(
    rows.map((r) => r.engine),
    ['tandem', 'llama.cpp'],
  );
  for (const r of rows) {
    assert.ok((r.warmup_ms as number) > 0, JSON.stringify(r));
    assert.ok((r.decode_tok_s as number) > 0 && (r.prefill_tok_s as number) > 0, JSON.stringify(r));
  }
  const cold = tandem(...args, '--no-llama-cpp');
  assert.equal(cold.code, 0, cold.stderr);
  assert.equal('warmup_ms' in JSON.parse(cold.stdout), false, 'no warm-up by default');
  const bad = tandem(...args, '--no-llama-cpp', '--warmup', '-1');
  assert.equal(bad.code, 3, bad.stderr); // invalid_usage
  assert.match(bad.stderr, /--warmup must be 0 or a positive integer, got -1/);
});
