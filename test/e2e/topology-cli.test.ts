import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createServer, type AddressInfo } from 'node:net';

/* The topology commands as a user runs them: real processes, exit codes, text and JSON. */

const repo = resolve(import.meta.dirname, '..', '..');
const fixtures = join(repo, 'test', 'fixtures', 'topology');

function tandem(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(
      process.execPath,
      [join(repo, 'bin', 'tandem.js'), ...args],
      { cwd: repo, timeout: 60_000, env: { ...process.env, ...env } },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        done({ code, stdout, stderr });
      },
    );
  });
}

test('topology plan --json has the documented shape; the text says when a full mesh is impossible', async () => {
  const json = await tandem([
    'topology',
    'plan',
    '--machines',
    '3x macbook-pro-m4-max, 2x mac-studio-m3-ultra',
    '--json',
  ]);
  assert.equal(json.code, 0, json.stderr);
  const plan = JSON.parse(json.stdout) as Record<string, unknown>;
  assert.equal(plan.topology, 'ring-with-chords');
  assert.equal(plan.full_mesh_possible, false);
  assert.equal(typeof plan.max_hops, 'number');
  for (const c of plan.cables as Record<string, string>[])
    assert.deepEqual(Object.keys(c), ['a', 'a_port', 'b', 'b_port']);
  const text = await tandem(['topology', 'plan', '--machines', '6x mac-mini-m4-pro']);
  assert.match(
    text.stdout,
    /a full mesh is impossible: a full mesh of 6 machines needs 5 Thunderbolt 5 ports on each/,
  );
  assert.match(text.stdout, /mac-mini-m4-pro-1 rear-1\s+<-> mac-mini-m4-pro-2 rear-1/);
  const bad = await tandem(['topology', 'plan', '--machines', '2x mac-toaster']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /TOPOLOGY_UNKNOWN_MACHINE[\s\S]*hint: use one of: macbook-pro-m4-pro/);
  for (const machines of ['', '0x mac-mini-m4-pro', ',,,', '1000x mac-mini-m4-pro']) {
    const refused = await tandem(['topology', 'plan', '--machines', machines]);
    assert.equal(refused.code, 2, `'${machines}': ${refused.stderr}`);
    assert.match(refused.stderr, /INVALID_ARGUMENT[\s\S]*hint: write 1 to 64 machines/);
  }
});

test('topology reads an MLX hostfile, draws it, and exports it back', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-topo-cli-'));
  try {
    const out = join(dir, 'copy.json');
    const text = await tandem([
      'topology',
      '--hostfile',
      join(fixtures, 'mlx-hostfile-jaccl-4.json'),
      '--export-mlx',
      out,
    ]);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /topology: full-mesh \(4 hosts, 6 links, max 1 hop\)/);
    assert.match(text.stdout, /m3-ultra-1:en3\s+m3-ultra-2:en3\s+tb5/);
    const copy = JSON.parse(readFileSync(out, 'utf8')) as { hosts: { ssh: string; rdma: unknown[] }[] };
    assert.deepEqual(copy.hosts[1]?.rdma, ['rdma_en3', null, 'rdma_en5', 'rdma_en4']);
    const json = await tandem(['topology', '--hostfile', out, '--json']);
    const g = JSON.parse(json.stdout) as { class: string; connectivity: { size: number; edges: number[][] } };
    assert.equal(g.class, 'full-mesh');
    assert.equal(g.connectivity.edges.length, 6);
    const none = await tandem(['topology'], { TANDEM_CONFIG: join(dir, 'missing.json') });
    assert.equal(none.code, 3);
    assert.match(none.stderr, /run `tandem init` first/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('doctor --json: findings with severity, evidence and fix; exit code 1 on an error', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-doctor-cli-'));
  try {
    const mine = await tandem(['doctor', '--report']);
    assert.equal(mine.code, 0, mine.stderr);
    const report = JSON.parse(mine.stdout) as { host: string; tandemVersion: string };
    const peer = { ...report, host: 'other-host', tandemVersion: '9.9.9' };
    writeFileSync(join(dir, 'peer.json'), JSON.stringify(peer));
    const res = await tandem(['doctor', '--mode=tcp', '--json', '--reports', join(dir, 'peer.json')]);
    assert.equal(res.code, 1);
    const out = JSON.parse(res.stdout) as {
      errors: number;
      findings: { check: string; severity: string; evidence: string; fix: string }[];
    };
    const version = out.findings.find((f) => f.check === 'version');
    assert.equal(version?.severity, 'error');
    assert.match(version?.evidence ?? '', /9\.9\.9: other-host/);
    assert.ok(out.errors >= 1);
    const clean = await tandem(['doctor', '--mode=tcp']);
    assert.equal(clean.code, 0, clean.stdout + clean.stderr);
    assert.match(clean.stdout, /0 error\(s\)/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('discovery options are checked before any socket opens; a taken port is a usage error, not a hang', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-topo-cli-'));
  const blocker = createServer();
  try {
    const secretFile = join(dir, 'secret');
    writeFileSync(secretFile, 'a-cluster-secret-of-forty-characters-xx\n');
    const discover = ['topology', '--discover', '--secret-file', secretFile, '--wait', '1', '--no-measure'];
    for (const [args, pattern] of [
      [[...discover, '--port', '70000', '--json'], /--port must be an integer in 1\.\.65535, got 70000/],
      [[...discover, '--port', '0'], /--port must be an integer in 1\.\.65535, got 0/],
      [[...discover, '--wait', '1e9'], /--wait must be > 0 and at most 2147483 seconds/],
      [[...discover, '--wait', '-1'], /--wait must be > 0/],
      [['init', '--secret-file', secretFile, '--expect', '0'], /--expect must be a positive integer, got 0/],
      [
        ['init', '--secret-file', secretFile, '--expect', '2.5'],
        /--expect must be a positive integer, got 2.5/,
      ],
      [['init', '--secret-file', secretFile, '--port', '65536'], /--port must be an integer in 1\.\.65535/],
      [
        ['init', '--secret-file', secretFile, '--wait', '1e12'],
        /--wait must be > 0 and at most 2147483 seconds/,
      ],
    ] as const) {
      const r = await tandem([...args]);
      assert.equal(r.code, 3, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, /CLI_USAGE/, args.join(' '));
      assert.match(r.stderr, pattern, args.join(' '));
    }
    await new Promise<void>((done) => blocker.listen({ port: 0, host: '::' }, done));
    const port = String((blocker.address() as AddressInfo).port);
    const started = Date.now();
    const taken = await tandem([...discover, '--port', port]);
    assert.equal(taken.code, 3, taken.stderr);
    assert.match(
      taken.stderr,
      new RegExp(`discovery port ${port} is in use[\\s\\S]*hint: stop the other agent`),
    );
    assert.ok(Date.now() - started < 15_000, 'the failed start exits at once');
  } finally {
    blocker.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
