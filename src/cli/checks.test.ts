import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { resolve } from 'node:path';
import { checkInteger, checkPort, checkSeconds, checkThreads, maxThreads } from './checks.js';
import { isTandemError } from '../errors/index.js';

const bin = resolve(import.meta.dirname, '..', '..', 'bin', 'tandem.js');
const usage = (pattern: RegExp) => (e: unknown) => isTandemError(e, 'CLI_USAGE') && pattern.test(e.message);

test('shared option checks: integers in range, threads, ports and timer-safe seconds', () => {
  assert.equal(maxThreads(), 4 * availableParallelism());
  assert.equal(checkThreads('run', maxThreads()), maxThreads());
  for (const bad of [0, -1, 1.5, maxThreads() + 1, 999])
    assert.throws(
      () => checkThreads('run', bad),
      usage(/^run: --threads must be an integer in 1\.\.\d+ \(at most 4x the \d+ cores here\)/),
      String(bad),
    );
  assert.equal(checkPort('init', 65535), 65535);
  for (const bad of [0, 65536, 70000, 1.5])
    assert.throws(
      () => checkPort('init', bad),
      usage(/--port must be an integer in 1\.\.65535/),
      String(bad),
    );
  assert.equal(checkInteger('x', 'agreement', 0, 0), 0);
  assert.throws(
    () => checkInteger('x', 'agreement', -1, 0),
    usage(/--agreement must be an integer >= 0, got -1/),
  );
  assert.throws(() => checkInteger('x', 'expect', 0, 1), usage(/--expect must be a positive integer, got 0/));
  assert.equal(checkSeconds('x', 'wait', 2147483), 2147483);
  for (const bad of [0, -1, 1e9, 1e12])
    assert.throws(
      () => checkSeconds('x', 'wait', bad),
      usage(/--wait must be > 0 and at most 2147483 seconds/),
      String(bad),
    );
  assert.equal(checkSeconds('x', 'wait', 0, true), 0);
});

test('every command that takes --threads refuses more than 4x the cores, before doing any work', () => {
  const many = String(maxThreads() + 1);
  for (const args of [
    ['run', 'missing.gguf', '--prompt', 'hi', '--threads', many],
    ['node', '--threads', many],
    ['bench', 'model', 'missing.gguf', '--threads', many],
    ['bench', 'cluster', 'missing.gguf', '--threads', many],
    ['demo', '--threads', many],
    ['make-model', 'never-written.gguf', '--threads', many],
  ]) {
    const r = spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(r.status, 3, `${args.join(' ')}: ${r.stderr}`);
    assert.match(
      r.stderr,
      new RegExp(`CLI_USAGE.*--threads must be an integer in 1\\.\\.${maxThreads()} \\(at most 4x the`),
      args.join(' '),
    );
  }
});

test('bench cluster caps --nodes like run and refuses a negative --agreement; bench model bounds --timeout', () => {
  for (const [args, pattern] of [
    [['bench', 'cluster', 'missing.gguf', '--nodes', '65'], /--nodes must be an integer in 1\.\.64, got 65/],
    [
      ['bench', 'cluster', 'missing.gguf', '--agreement', '-1'],
      /--agreement must be an integer >= 0, got -1/,
    ],
    [
      ['bench', 'model', 'missing.gguf', '--timeout', '1e12'],
      /--timeout must be > 0 and at most 2147483 seconds/,
    ],
  ] as const) {
    const r = spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(r.status, 3, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, pattern);
  }
});
