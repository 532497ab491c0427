// The package as a user gets it: `npm pack` of this checkout installed into a temporary prefix,
// offline, and `tandem` run by its bare name from a directory outside the clone. The runtime
// dependencies come from this checkout's node_modules as local tarballs (`npm ls --omit=dev`
// lists them), so the install downloads nothing, and what the package lacks (a file left out
// of package.json's `files`, a dependency declared only for development) fails here.
// bin/setup.sh's PATH step is checked the same way, against a temporary npm prefix.
import assert from 'node:assert/strict';
import { spawnSync, type SpawnSyncOptions } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, delimiter, dirname, join, relative, resolve } from 'node:path';
import { after, test } from 'node:test';

const root = resolve(import.meta.dirname, '..', '..');
const dir = mkdtempSync(join(tmpdir(), 'tandem-install-'));
after(() => rmSync(dir, { recursive: true, force: true }));
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

function sh(file: string, args: readonly string[], o: SpawnSyncOptions = {}): string {
  const r = spawnSync(file, args, { encoding: 'utf8', timeout: 240_000, ...o });
  assert.equal(r.status, 0, `${file} ${args.join(' ')}: ${String(r.stderr)}${String(r.stdout)}`);
  return String(r.stdout);
}

/** PATH with `bin` first and this node beside it (bin/tandem.js starts with `#!/usr/bin/env node`). */
function pathWith(bin: string): string {
  return [bin, dirname(process.execPath), process.env.PATH ?? ''].join(delimiter);
}

/** The bare `tandem ARGS` in a directory outside the clone, found on PATH. */
function tandem(
  bin: string,
  args: readonly string[],
): { code: number | null; stdout: string; stderr: string } {
  const cwd = join(dir, 'elsewhere');
  mkdirSync(cwd, { recursive: true });
  const r = spawnSync('tandem', args, {
    cwd,
    encoding: 'utf8',
    timeout: 240_000,
    env: {
      ...process.env,
      PATH: pathWith(bin),
      TANDEM_CACHE_DIR: join(dir, 'cache'),
      CC: join(dir, 'no-cc'),
    },
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

test(
  'npm pack gives a tarball that installs offline into a prefix and runs from anywhere',
  { timeout: 600_000 },
  () => {
    const packed = join(dir, 'packed');
    mkdirSync(packed);
    sh(npm, ['pack', '--silent', '--pack-destination', packed], { cwd: root });
    const [tarball] = readdirSync(packed).filter((f) => f.endsWith('.tgz'));
    assert.ok(tarball, 'npm pack wrote a .tgz');
    const listed = sh('tar', ['-tzf', join(packed, tarball)]).split('\n');
    for (const f of ['bin/tandem.js', 'src/cli/main.ts', 'docs/security.md', 'README.md', 'package.json'])
      assert.ok(listed.includes(`package/${f}`), `the tarball holds ${f}`);
    assert.deepEqual(
      listed.filter((f) => f.endsWith('.test.ts')),
      [],
      'tests stay out of the package',
    );
    // Each runtime dependency as a tarball of its installed folder (npm strips the top
    // directory), placed where this checkout's lockfile places it: a lockfile for the prefix
    // names every package's tarball, so npm resolves nothing (a package installed in two
    // versions, as sonic-boom is, would otherwise send it to the registry for the other).
    const deps = sh(npm, ['ls', '--omit=dev', '--all', '--parseable'], { cwd: root })
      .split('\n')
      .slice(1)
      .filter((p) => p.includes('node_modules'));
    assert.ok(deps.length > 0, 'the package has runtime dependencies');
    const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, Record<string, unknown>>;
    };
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as Record<string, unknown>;
    const packages: Record<string, Record<string, unknown>> = {};
    [...new Set(deps)].forEach((p, i) => {
      const out = join(packed, `dep-${i}-${basename(p)}.tar`);
      sh('tar', ['-cf', out, '-C', dirname(p), basename(p)]);
      const key = relative(root, p);
      const { integrity: _, ...entry } = lock.packages[key] ?? {};
      packages[key] = { ...entry, resolved: `file:${out}` };
    });
    // optional packages for other platforms stay as locked: npm skips them without a fetch
    for (const [key, entry] of Object.entries(lock.packages))
      if (key.startsWith('node_modules/') && !(key in packages) && !entry.dev) packages[key] = entry;
    const spec = `file:${join(packed, tarball)}`;
    packages['node_modules/tandem'] = {
      version: pkg.version,
      resolved: spec,
      dependencies: pkg.dependencies,
      bin: pkg.bin,
    };
    packages[''] = { name: 'prefix', dependencies: { tandem: spec } };
    const prefix = join(dir, 'prefix');
    mkdirSync(prefix);
    writeFileSync(
      join(prefix, 'package.json'),
      JSON.stringify({ name: 'prefix', dependencies: { tandem: spec } }),
    );
    writeFileSync(
      join(prefix, 'package-lock.json'),
      JSON.stringify({ name: 'prefix', lockfileVersion: 3, requires: true, packages }),
    );
    // an empty cache of its own: whatever npm would download, it cannot
    sh(
      npm,
      ['ci', '--offline', '--ignore-scripts', '--no-audit', '--no-fund', '--cache', join(dir, 'npm-cache')],
      { cwd: prefix },
    );
    const bin = join(prefix, 'node_modules', '.bin');
    const help = tandem(bin, ['--help']);
    assert.equal(help.code, 0, help.stderr);
    assert.match(help.stdout, /usage: tandem <command>/);
    const made = tandem(bin, ['make-model', 'tiny.gguf', '--shape', 'tiny', '--type', 'q8_0']);
    assert.equal(made.code, 0, made.stderr);
    const run = tandem(bin, [
      'run',
      'tiny.gguf',
      '--prompt',
      'Hello',
      '--max-tokens',
      '3',
      '--temperature',
      '0',
      '--threads',
      '1',
    ]);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stderr, /\d+ prompt tokens, 3 generated \(length\)/);
    // the shipped model serves from the installed package (models/ is in `files`)
    const version = tandem(bin, ['--version']);
    assert.match(version.stdout, /^tandem \d+\.\d+\.\d+/);
  },
);

test("bin/setup.sh --path-only links npm's global bin/tandem to the checkout and says so", () => {
  const prefix = join(dir, 'npm-global');
  const r = spawnSync(join(root, 'bin', 'setup.sh'), ['--path-only'], {
    cwd: dir,
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, npm_config_prefix: prefix, PATH: pathWith(dirname(process.execPath)) },
  });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /setup: putting tandem on the PATH: linking .*\/bin\/tandem -> .*bin\/tandem\.js/);
  assert.match(r.stderr, /is not on your PATH; add it/);
  const version = tandem(join(prefix, 'bin'), ['--version']);
  assert.equal(version.code, 0, version.stderr);
  assert.match(version.stdout, /^tandem /);
});
