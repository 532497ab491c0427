import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const bin = join(import.meta.dirname, '..', '..', 'bin', 'tandem.js');
const tandem = (...args: string[]) =>
  spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', timeout: 60_000 });

test("`tandem help COMMAND` prints that command's help; an unknown name is the unknown-command error", () => {
  const one = tandem('help', 'run');
  assert.equal(one.status, 0, one.stderr);
  assert.match(one.stdout, /^usage: tandem run MODEL \[options\]/);
  const two = tandem('help', 'bench', 'cluster');
  assert.equal(two.status, 0, two.stderr);
  assert.match(two.stdout, /^usage: tandem bench cluster MODEL \[options\]/);
  const bad = tandem('help', 'bogus');
  assert.equal(bad.status, 3);
  assert.match(bad.stderr, /unknown command 'bogus'/);
  for (const args of [['bench'], ['bench', '--help'], ['help', 'bench']]) {
    const group = tandem(...args);
    assert.equal(group.status, 0, group.stderr);
    assert.match(group.stdout, /usage: tandem bench <command>/);
    assert.match(group.stdout, /bench fabric .*\n.*bench collectives/);
    assert.doesNotMatch(group.stdout, /make-model/);
  }
  const list = tandem('help');
  assert.equal(list.status, 0);
  assert.match(list.stdout, /tandem help COMMAND/);
});
