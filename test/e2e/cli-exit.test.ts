import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';

/* bin/tandem.js ends the process once the command returned, even if a handle leaked. */

const bin = join(resolve(import.meta.dirname, '..', '..'), 'bin', 'tandem.js');
// A referenced interval that nothing clears: without the exit in bin/tandem.js the process never ends.
const leak = 'data:text/javascript,setInterval(() => {}, 1000)';

test('a command that leaves a handle open still exits with its code, its output intact', () => {
  const ok = spawnSync(process.execPath, ['--import', leak, bin, '--version'], {
    encoding: 'utf8',
    timeout: 10_000,
  });
  assert.equal(ok.signal, null, 'killed by the timeout: the process hung');
  assert.equal(ok.status, 0, ok.stderr);
  assert.match(ok.stdout, /^tandem \d+\.\d+\.\d+/);
  const bad = spawnSync(process.execPath, ['--import', leak, bin, 'no-such-command'], {
    encoding: 'utf8',
    timeout: 10_000,
  });
  assert.equal(bad.signal, null, 'killed by the timeout: the process hung');
  assert.equal(bad.status, 3);
  assert.match(bad.stderr, /CLI_UNKNOWN_COMMAND/);
  const script = join(resolve(import.meta.dirname, '..', '..'), 'bench', 'fabric.ts');
  const bench = spawnSync(process.execPath, ['--import', 'tsx', '--import', leak, script, '--sizes', ''], {
    encoding: 'utf8',
    timeout: 10_000,
  });
  assert.equal(bench.signal, null, 'bench/fabric.ts: killed by the timeout: the process hung');
  assert.equal(bench.status, 3, bench.stderr);
  assert.match(bench.stderr, /--sizes is empty/);
});
