#!/usr/bin/env node
// Runs every *.test.ts under src/, test/ and bench/ (or under the paths given) with node:test
// through tsx. Node 20's --test does not find .ts files by itself.
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

function collect(path, out) {
  const st = statSync(path, { throwIfNoEntry: false });
  if (!st) return;
  if (st.isFile()) {
    if (path.endsWith('.test.ts')) out.push(path);
    return;
  }
  for (const name of readdirSync(path)) {
    if (name === 'node_modules' || name.startsWith('.')) continue;
    collect(join(path, name), out);
  }
}

const roots = process.argv.slice(2).filter((a) => !a.startsWith('-'));
const files = [];
for (const root of roots.length ? roots : ['src', 'test', 'bench']) collect(root, files);
files.sort();
if (files.length === 0) {
  console.error('no *.test.ts files found under', roots.join(' ') || 'src test bench');
  process.exit(1);
}
const concurrency = process.env.TANDEM_TEST_CONCURRENCY ?? '2';
// --test-timeout bounds each file as a whole too: it must leave room for the sum of the bounds
// its tests set themselves (a multi-process file's tests each allow minutes on a loaded machine),
// so that a slow file fails on the bound that names what it waited for, not on this one.
const result = spawnSync(
  process.execPath,
  ['--import', 'tsx', '--test', `--test-concurrency=${concurrency}`, '--test-timeout=900000', ...files],
  { stdio: 'inherit' },
);
process.exit(result.status ?? 1);
