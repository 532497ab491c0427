import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defineCommand, formatHelp, parseArgs } from './options.js';
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
  for (const argv of [['--nope'], ['--iterations', 'x'], ['--provider', 'udp'], ['--provider'], ['--json=maybe']]) {
    assert.throws(() => parseArgs(spec, argv), (e) => isTandemError(e, 'CLI_USAGE'), argv.join(' '));
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
    assert.throws(() => parseArgs(spec, ['--sizes', raw]), (e) => isTandemError(e, 'CLI_USAGE') && pattern.test(e.message), raw);
  }
  assert.deepEqual(parseArgs(spec, ['--sizes', ' 8 , 64 ']).options.sizes, ['8', '64']);
});
