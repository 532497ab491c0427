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
