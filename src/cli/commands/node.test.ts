import { test } from 'node:test';
import assert from 'node:assert/strict';
import { exitCodeFor } from '../../errors/index.js';
import { runTandem } from '../testing.js';

const env = { ...process.env, TANDEM_SECRET: 'node-cli-test-secret-0123456789' };

test('node refuses --join with --discover, --discovery-port without --discover, and a bad --speed, naming each', () => {
  const cases: [string[], RegExp][] = [
    [['--join', '127.0.0.1:7110', '--discover'], /--join HOST:PORT and --discover both given/],
    [['--discovery-port', '7111'], /--discovery-port applies to --discover only/],
    [['--discover', '--discovery-port', '0'], /--discovery-port/],
    [['--speed', '0'], /--speed 0 is not a positive number/],
    [['--discover', '--once'], /--once and --announce apply to a listening node/],
  ];
  for (const [args, message] of cases) {
    const r = runTandem(['node', ...args], { env, timeoutMs: 30_000 });
    assert.equal(r.code, exitCodeFor('invalid_usage'), `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
  }
});

test('node and run --nodes refuse a malformed TANDEM_CLUSTER_SILENCE_MS or TANDEM_NODE_START_MS before starting anything', () => {
  const cases: [string[], NodeJS.ProcessEnv, RegExp][] = [
    [
      ['node', '--listen', '127.0.0.1:0'],
      { TANDEM_CLUSTER_SILENCE_MS: 'slow' },
      /TANDEM_CLUSTER_SILENCE_MS=slow/,
    ],
    [
      ['run', 'missing.gguf', '--nodes', '2', '--prompt-tokens', '1'],
      { TANDEM_NODE_START_MS: '5' },
      /TANDEM_NODE_START_MS=5 /,
    ],
  ];
  for (const [args, extra, message] of cases) {
    const r = runTandem(args, { env: { ...env, ...extra }, timeoutMs: 30_000 });
    assert.equal(r.code, exitCodeFor('invalid_usage'), `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
  }
});
