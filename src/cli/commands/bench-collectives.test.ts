import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';

const bin = resolve(import.meta.dirname, '..', '..', '..', 'bin', 'tandem.js');

function tandem(...args: string[]): { code: number | null; stderr: string } {
  const r = spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', timeout: 30_000 });
  return { code: r.status, stderr: r.stderr };
}

test('bench collectives and bench fabric refuse what they cannot run, before starting any rank', () => {
  for (const [args, pattern] of [
    [['bench', 'collectives', '--provider', 'loopback', '--ranks', '2'], /loopback connects ranks inside one process only, so it cannot run 2 rank processes/],
    [['bench', 'collectives', '--sizes', ''], /--sizes is empty/],
    [['bench', 'collectives', '--sizes', '8,,16'], /--sizes has an empty item in '8,,16'/],
    [['bench', 'collectives', '--sizes', '8,6'], /size 6 B is not a whole number of f32 values \(4 B each\)/],
    [['bench', 'fabric', '--sizes', ''], /--sizes is empty/],
  ] as const) {
    const r = tandem(...args);
    assert.equal(r.code, 3, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /CLI_USAGE/);
    assert.match(r.stderr, pattern);
    assert.match(r.stderr, /hint: /);
  }
});

test('bench collectives over loopback runs with one rank', () => {
  const r = spawnSync(process.execPath, [bin, 'bench', 'collectives', '--provider', 'loopback', '--ranks', '1', '--sizes', '8', '--iterations', '5', '--json'], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(r.status, 0, r.stderr);
  assert.equal((JSON.parse(r.stdout) as { bytes: number }).bytes, 8);
});
