import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defineCommand, formatHelp, parseArgs, type OptionTable, type ParsedOptions } from './options.js';
import { isTandemError } from '../errors/index.js';

const spec = defineCommand({
  name: 'bench fabric',
  summary: 'measure',
  positionals: [{ name: 'model', description: 'a model', required: false }],
  options: {
    provider: { type: 'string', description: 'which', choices: ['shm', 'tcp'], default: 'shm' },
    sizes: { type: 'list', description: 'sizes' },
    iterations: { type: 'number', description: 'n', default: 10 },
    json: { type: 'boolean', description: 'json' },
  },
  async run() {},
});

test('parses values, lists, flags and defaults', () => {
  const { options, positionals } = parseArgs(spec, ['m.gguf', '--provider=tcp', '--sizes', '8,64', '--json']);
  assert.deepEqual(positionals, ['m.gguf']);
  assert.equal(options.provider, 'tcp');
  assert.deepEqual(options.sizes, ['8', '64']);
  assert.equal(options.iterations, 10);
  assert.equal(options.json, true);
});

test('rejects unknown options, bad numbers and bad choices with a usage error', () => {
  for (const argv of [
    ['--nope'],
    ['--iterations', 'x'],
    ['--provider', 'udp'],
    ['--provider'],
    ['--json=maybe'],
  ]) {
    assert.throws(
      () => parseArgs(spec, argv),
      (e) => isTandemError(e, 'CLI_USAGE'),
      argv.join(' '),
    );
  }
});

test('help lists every option with its default', () => {
  const help = formatHelp(spec);
  assert.match(help, /--provider <shm\|tcp>\s+which \(default: shm\)/);
  assert.match(help, /--iterations <number>/);
  assert.match(help, /usage: tandem bench fabric \[MODEL\]/);
});

test('a list option refuses an empty list and empty items instead of falling back to the default', () => {
  for (const [raw, pattern] of [
    ['', /--sizes is empty/],
    [' ', /--sizes is empty/],
    ['8,,64', /--sizes has an empty item in '8,,64'/],
    ['8,64,', /--sizes has an empty item in '8,64,'/],
    [',8', /--sizes has an empty item/],
  ] as const) {
    assert.throws(
      () => parseArgs(spec, ['--sizes', raw]),
      (e) => isTandemError(e, 'CLI_USAGE') && pattern.test(e.message),
      raw,
    );
  }
  assert.deepEqual(parseArgs(spec, ['--sizes', ' 8 , 64 ']).options.sizes, ['8', '64']);
});

test("a value-taking option refuses one of the command's own options as its value, but takes other dashed text", () => {
  const run = defineCommand({
    name: 'run',
    summary: 'generate',
    positionals: [{ name: 'model', description: 'model', required: true }],
    options: {
      prompt: { type: 'string', description: 'text' },
      'max-tokens': { type: 'number', description: 'n', default: 128 },
      json: { type: 'boolean', description: 'json', short: 'j' },
    },
    async run() {},
  });
  for (const [argv, pattern] of [
    [
      ['m', '--prompt', '--max-tokens', '2'],
      /--prompt needs a value, but the next argument is the option '--max-tokens'/,
    ],
    [['m', '--prompt', '--no-json'], /the next argument is the option '--no-json'/],
    [['m', '--prompt', '-j'], /the next argument is the option '-j'/],
    [['m', '--prompt', '--max-tokens=2'], /the next argument is the option '--max-tokens=2'/],
  ] as const) {
    assert.throws(
      () => parseArgs(run, argv),
      (e) => isTandemError(e, 'CLI_USAGE') && pattern.test(e.message),
      argv.join(' '),
    );
  }
  assert.equal(parseArgs(run, ['m', '--prompt', '-5 degrees']).options.prompt, '-5 degrees');
  assert.equal(parseArgs(run, ['m', '--prompt', '--unknown-text']).options.prompt, '--unknown-text');
  assert.equal(parseArgs(run, ['m', '--prompt=--max-tokens']).options.prompt, '--max-tokens');
  assert.equal(parseArgs(run, ['m', '--max-tokens', '-1']).options['max-tokens'], -1);
});

test('extra positional arguments are a usage error naming them', () => {
  const none = defineCommand({
    name: 'devinfo',
    summary: 'list',
    options: { json: { type: 'boolean', description: 'json' } },
    async run() {},
  });
  assert.throws(
    () => parseArgs(none, ['extra']),
    (e) =>
      isTandemError(e, 'CLI_USAGE') &&
      /devinfo: unexpected argument 'extra' \(devinfo takes no arguments\)/.test(e.message),
  );
  assert.throws(
    () => parseArgs(spec, ['m.gguf', 'one', 'two']),
    (e) =>
      isTandemError(e, 'CLI_USAGE') &&
      /unexpected argument 'one' 'two' \(bench fabric takes MODEL only\)/.test(e.message),
  );
  assert.deepEqual(parseArgs(spec, ['m.gguf']).positionals, ['m.gguf']);
});

test('choices narrow the parsed types (checked by tsc: each @ts-expect-error must be an error)', () => {
  const { options } = parseArgs(spec, ['--provider', 'tcp']);
  const provider: 'shm' | 'tcp' = options.provider;
  assert.equal(provider, 'tcp');
  // @ts-expect-error: 'udp' is not one of the choices
  const udp: typeof options.provider = 'udp';
  const table = {
    kv: { type: 'string', description: 'kv', choices: ['f32', 'f16'] },
    ops: { type: 'list', description: 'ops', choices: ['sum', 'max'], default: ['sum'] },
    name: { type: 'string', description: 'any text' },
  } as const satisfies OptionTable;
  const apart = defineCommand({ name: 'x', summary: 'x', options: table, async run() {} });
  const parsed: ParsedOptions<typeof table> = parseArgs(apart, [
    '--kv',
    'f16',
    '--ops',
    'max',
    '--name',
    'x',
  ]).options;
  const kv: 'f32' | 'f16' | undefined = parsed.kv;
  const ops: ('sum' | 'max')[] = parsed.ops;
  const name: string | undefined = parsed.name;
  // @ts-expect-error: an option without a default may be absent
  const given: 'f32' | 'f16' = parsed.kv;
  // @ts-expect-error: 'min' is not one of the list's choices
  parsed.ops = ['min'];
  assert.deepEqual([kv, ops, name, udp, given], ['f16', ['max'], 'x', 'udp', 'f16']);
});
