import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ChatTemplate, generate, openModel } from '../../engine/index.js';
import { runDistributed } from '../../cluster/index.js';
import { isTandemError } from '../../errors/index.js';
import { runTandem, tempModel } from '../testing.js';

const path = tempModel('tandem-run-', { arch: 'qwen2', shape: 'tiny', type: 'q8_0', seed: 3 });

const tandem = (...args: string[]) => runTandem(args);

test("tandem run --json: greedy tokens equal the engine's, with text and timings", async () => {
  const r = tandem(
    'run',
    path(),
    '--prompt-tokens',
    '5,6,7,8',
    '--max-tokens',
    '12',
    '--temperature',
    '0',
    '--threads',
    '1',
    '--json',
  );
  assert.equal(r.code, 0, r.stderr);
  const out = JSON.parse(r.stdout) as {
    tokens: number[];
    text: string;
    ttft_ms: number;
    decode_tok_s: number;
  };
  assert.deepEqual(Object.keys(out), ['tokens', 'text', 'ttft_ms', 'decode_tok_s']);
  assert.ok(out.ttft_ms > 0 && out.decode_tok_s > 0);
  const opened = await openModel(path(), { threads: 1 });
  try {
    const expected = await generate(
      opened.model,
      opened.model.newSession({ contextLength: 64 }),
      [5, 6, 7, 8],
      { maxTokens: 12 },
    );
    const eog = expected.tokens.findIndex((t) => opened.tokenizer!.isEndOfGeneration(t));
    assert.deepEqual(out.tokens, eog < 0 ? expected.tokens : expected.tokens.slice(0, eog + 1));
    assert.equal(
      out.text,
      opened.tokenizer!.decode(out.tokens.filter((t) => !opened.tokenizer!.isEndOfGeneration(t))),
    );
  } finally {
    await opened.close();
  }
});

test("tandem run --chat renders the model's chat template around the prompt (greedy tokens equal the engine's on the rendered prompt)", async () => {
  const r = tandem(
    'run',
    path(),
    '--chat',
    '--system',
    'Be brief.',
    '--prompt',
    'Hello there',
    '--max-tokens',
    '6',
    '--temperature',
    '0',
    '--threads',
    '1',
    '--json',
  );
  assert.equal(r.code, 0, r.stderr);
  const out = JSON.parse(r.stdout) as { tokens: number[] };
  const opened = await openModel(path(), { threads: 1 });
  try {
    const tokenizer = opened.tokenizer!;
    const source = opened.file.meta('tokenizer.chat_template') as string;
    const prompt = ChatTemplate.fromModel(source).encode(tokenizer, [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hello there' },
    ]);
    assert.notDeepEqual(prompt, tokenizer.encode('Hello there'), 'the template adds turn markers');
    const expected = await generate(opened.model, opened.model.newSession({ contextLength: 128 }), prompt, {
      maxTokens: 6,
    });
    const eog = expected.tokens.findIndex((t) => tokenizer.isEndOfGeneration(t));
    assert.deepEqual(out.tokens, eog < 0 ? expected.tokens : expected.tokens.slice(0, eog + 1));
  } finally {
    await opened.close();
  }
  const noPrompt = tandem('run', path(), '--chat', '--prompt-tokens', '1,2');
  assert.equal(noPrompt.code, 3);
  assert.match(noPrompt.stderr, /CLI_USAGE/);
});

test('tandem run streams text from a text prompt, and reports usage errors and context limits', () => {
  const ok = tandem(
    'run',
    path(),
    '--prompt',
    'Hello there',
    '--max-tokens',
    '4',
    '--seed',
    '1',
    '--threads',
    '1',
  );
  assert.equal(ok.code, 0, ok.stderr);
  assert.match(ok.stderr, /prompt tokens, \d+ generated/);
  const both = tandem('run', path(), '--prompt', 'x', '--prompt-tokens', '1');
  assert.equal(both.code, 3);
  assert.match(both.stderr, /CLI_USAGE/);
  // --max-tokens past the context: what fits is generated (16 - 3 + 1), then finish reason length
  const full = tandem(
    'run',
    path(),
    '--prompt-tokens',
    '5,6,7',
    '--max-tokens',
    '100',
    '--context',
    '16',
    '--threads',
    '1',
    '--temperature',
    '0',
  );
  assert.equal(full.code, 0, full.stderr);
  assert.match(full.stderr, /--max-tokens 100 goes past the context of 16 positions; generating at most 14/);
  assert.match(full.stderr, /3 prompt tokens, 14 generated \(length\)/);
  // a prompt longer than the context is still a typed error
  const tooLong = tandem(
    'run',
    path(),
    '--prompt-tokens',
    Array.from({ length: 17 }, (_, i) => String(5 + i)).join(','),
    '--context',
    '16',
    '--threads',
    '1',
  );
  assert.equal(tooLong.code, 3);
  assert.match(tooLong.stderr, /KV_CONTEXT_FULL/);
  const bad = tandem('run', path(), '--prompt-tokens', '999999', '--threads', '1');
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /GENERATE_PROMPT/);
});

test("tandem bench model --json prints one line per engine with the issue's fields", () => {
  const r = tandem(
    'bench',
    'model',
    path(),
    '--threads',
    '1',
    '--prompt-tokens',
    '16',
    '--tokens',
    '4',
    '--json',
  );
  assert.equal(r.code, 0, r.stderr);
  const lines = r.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.deepEqual(
    lines.map((l) => l.engine),
    ['tandem', 'llama.cpp'],
  );
  for (const l of lines) {
    assert.deepEqual(Object.keys(l), [
      'engine',
      'threads',
      'prefill_tok_s',
      'decode_tok_s',
      'ttft_ms',
      'peak_rss_mb',
    ]);
    assert.equal(l.threads, 1);
    for (const k of ['prefill_tok_s', 'decode_tok_s', 'ttft_ms', 'peak_rss_mb'])
      assert.ok((l[k] as number) > 0, `${String(l.engine)} ${k}`);
  }
});

test('tandem run refuses conflicting, ignored and malformed options with a usage error naming them', () => {
  const base = [path(), '--prompt-tokens', '5,6', '--max-tokens', '2', '--threads', '1'];
  for (const [extra, pattern] of [
    [['--nodes', '2', '--hosts', 'hosts.txt'], /--nodes and --hosts both given/],
    [['--context', '0'], /--context must be a positive integer, got 0/],
    [['--context', '-5'], /--context must be a positive integer, got -5/],
    [['--context', '1.5'], /--context must be a positive integer, got 1.5/],
    [['--nodes', '2', '--context', '64'], /--context applies to runs on this machine only/],
    [['--nodes', '2', '--parallel', 'hybrid', '--tp', '0'], /--tp must be an integer in 1\.\.64, got 0/],
    [['--nodes', '2', '--tp', '2'], /--tp 2 needs --parallel hybrid/],
    [['--wire', 'f16'], /--wire applies only with --nodes or --hosts/],
    [
      ['--parallel', 'pp', '--secret-file', 's', '--provider', 'tcp'],
      /--parallel, --secret-file, --provider apply only with --nodes or --hosts/,
    ],
    [['--mem-limit', '0'], /--mem-limit '0' is not a positive byte size/],
    [['extra'], /unexpected argument 'extra' \(run takes MODEL only\)/],
    [['--prompt-tokens', '1,,2'], /--prompt-tokens has an empty item in '1,,2'/],
    [['--prompt-tokens', '1,2,'], /--prompt-tokens has an empty item/],
    [['--prompt-tokens', '1e3'], /--prompt-tokens item '1e3' is not a token id/],
    [['--prompt-tokens', '0x10'], /--prompt-tokens item '0x10' is not a token id/],
  ] as const) {
    const r = tandem('run', ...base, ...extra);
    assert.equal(r.code, 3, `${extra.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /CLI_USAGE/, extra.join(' '));
    assert.match(r.stderr, pattern, extra.join(' '));
  }
  const forgot = tandem('run', path(), '--prompt', '--max-tokens', '2');
  assert.equal(forgot.code, 3);
  assert.match(forgot.stderr, /--prompt needs a value, but the next argument is the option '--max-tokens'/);
});

test('tandem run --mem-limit on one machine stops before loading when the model and its KV cache do not fit', () => {
  const small = tandem(
    'run',
    path(),
    '--prompt-tokens',
    '5,6',
    '--max-tokens',
    '2',
    '--threads',
    '1',
    '--mem-limit',
    '64K',
  );
  assert.equal(small.code, 2, small.stderr);
  assert.match(
    small.stderr,
    /PAR_NO_FIT.*the model needs .* with a f32 KV cache of \d+ positions, more than --mem-limit 64\.0 KiB/,
  );
  const roomy = tandem(
    'run',
    path(),
    '--prompt-tokens',
    '5,6',
    '--max-tokens',
    '2',
    '--threads',
    '1',
    '--mem-limit',
    '1G',
    '--json',
  );
  assert.equal(roomy.code, 0, roomy.stderr);
});

test('runDistributed refuses --tp 0 instead of reading it as the default', async () => {
  await assert.rejects(
    runDistributed({ model: path(), nodes: 2, parallel: 'hybrid', tpSize: 0, prompt: [5], maxTokens: 1 }),
    (e) => isTandemError(e, 'CLI_USAGE') && /--tp must be a positive integer, got 0/.test(e.message),
  );
});
