import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../errors/index.js';
import {
  checkClusterLimits,
  DEFAULT_NODE_START_MS,
  DEFAULT_SILENCE_MS,
  NODE_START_ENV,
  nodeStartMs,
  SILENCE_ENV,
  silenceLimitMs,
} from './cluster-limits.js';
import { DEAD_AFTER_MS } from './protocol.js';

function withEnv(name: string, value: string | undefined, body: () => void): void {
  const before = process.env[name];
  if (value === undefined) delete process.env[name];
  else process.env[name] = value;
  try {
    body();
  } finally {
    if (before === undefined) delete process.env[name];
    else process.env[name] = before;
  }
}

test('the limits are the defaults when their variables are unset or empty', () => {
  for (const v of [undefined, '', '  ']) {
    withEnv(SILENCE_ENV, v, () => assert.equal(silenceLimitMs(), DEFAULT_SILENCE_MS));
    withEnv(NODE_START_ENV, v, () => assert.equal(nodeStartMs(), DEFAULT_NODE_START_MS));
  }
  assert.equal(DEAD_AFTER_MS, DEFAULT_SILENCE_MS);
  assert.equal(DEFAULT_SILENCE_MS, 2500);
  assert.equal(DEFAULT_NODE_START_MS, 60_000);
});

test('TANDEM_CLUSTER_SILENCE_MS and TANDEM_NODE_START_MS set the limits', () => {
  withEnv(SILENCE_ENV, '20000', () => assert.equal(silenceLimitMs(), 20_000));
  withEnv(NODE_START_ENV, '600000', () => assert.equal(nodeStartMs(), 600_000));
});

test('a malformed limit is CLI_USAGE naming the variable and its value', () => {
  const cases: [string, string][] = [
    [SILENCE_ENV, 'soon'],
    [SILENCE_ENV, '2.5'],
    [SILENCE_ENV, '1000'],
    [SILENCE_ENV, '-5'],
    [NODE_START_ENV, '1e12'],
    [NODE_START_ENV, '10'],
  ];
  for (const [name, value] of cases) {
    withEnv(name, value, () =>
      assert.throws(checkClusterLimits, (e: unknown) => {
        assert.ok(isTandemError(e));
        assert.equal(e.code, 'CLI_USAGE');
        assert.match(e.message, new RegExp(`${name}=${value.replace('.', '\\.')}`));
        assert.match(e.hint ?? '', /unset it/);
        return true;
      }),
    );
  }
});
