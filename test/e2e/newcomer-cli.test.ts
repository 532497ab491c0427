// The commands as a new user types them, from a directory outside the clone: one hostfile story,
// one secret rule, the model path checked before any node starts, the prompt from stdin, the
// notes on random weights and on --max-tokens past the context.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { tandemBin, tempModel } from '../../src/cli/testing.js';
import { launchLocalNodes, runDistributed } from '../../src/cluster/index.js';
import { isTandemError } from '../../src/errors/index.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-newcomer-'));
after(() => rmSync(dir, { recursive: true, force: true }));
const model = tempModel('tandem-newcomer-model-', { arch: 'llama', shape: 'tiny', type: 'q8_0', seed: 5 });

/** `tandem ARGS` run in `dir` (not the clone), with TANDEM_SECRET unset unless `env` sets it. */
function tandem(
  args: readonly string[],
  o: { env?: NodeJS.ProcessEnv; input?: string } = {},
): { code: number | null; stdout: string; stderr: string } {
  const env = { ...process.env, ...o.env };
  if (o.env?.TANDEM_SECRET === undefined) delete env.TANDEM_SECRET;
  const r = spawnSync(process.execPath, [tandemBin, ...args], {
    cwd: dir,
    encoding: 'utf8',
    timeout: 90_000,
    env,
    input: o.input ?? '',
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

test('topology and doctor take either hostfile format; a missing hostfile is a typed error, not exit 70', () => {
  const missing = tandem(['topology', '--hostfile', '/nonexistent.json']);
  assert.equal(missing.code, 2, missing.stderr);
  assert.match(missing.stderr, /CLUSTER_BAD_HOSTFILE.*cannot read hostfile \/nonexistent\.json/);
  const list = join(dir, 'hosts.txt');
  writeFileSync(list, 'm1.local:7100 mem=8G\nm2.local:7100\n');
  const shown = tandem(['topology', '--hostfile', list, '--json']);
  assert.equal(shown.code, 0, shown.stderr);
  assert.deepEqual((JSON.parse(shown.stdout) as { hosts: string[] }).hosts, ['m1.local', 'm2.local']);
  const doctor = tandem(['doctor', '--hostfile', '/nonexistent.txt']);
  assert.equal(doctor.code, 2, doctor.stderr);
  assert.match(doctor.stderr, /CLUSTER_BAD_HOSTFILE/);
});

test('one secret rule: --secret is refused saying what to do, short secrets are refused, tandem secret writes one', async () => {
  for (const args of [
    ['node', '--secret', 's3cret', '--listen', '127.0.0.1:0'],
    ['run', 'model.gguf', '--hosts', 'hosts.txt', '--secret', 's3cret', '--prompt', 'hi'],
    ['bench', 'cluster', 'model.gguf', '--hosts', 'hosts.txt', '--secret', 's3cret'],
    ['topology', '--discover', '--secret', 's3cret'],
    ['init', '--secret', 's3cret'],
  ]) {
    const r = tandem(args);
    assert.equal(r.code, 3, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /--secret is refused: a secret on the command line is visible/, args.join(' '));
    assert.match(r.stderr, /--secret-file FILE, or set TANDEM_SECRET/, args.join(' '));
  }
  const short = tandem(['node', '--listen', '127.0.0.1:0'], { env: { TANDEM_SECRET: 'x' } });
  assert.equal(short.code, 2, short.stderr);
  assert.match(short.stderr, /TOPOLOGY_BAD_SECRET.*only 1 bytes \(need at least 16\)/);
  const none = tandem(['node', '--listen', '127.0.0.1:0']);
  assert.match(none.stderr, /the cluster secret is missing/);
  const printed = tandem(['secret']);
  assert.equal(printed.code, 0, printed.stderr);
  assert.match(printed.stdout, /^[0-9a-f]{64}\n$/);
  const file = join(dir, 'cluster.secret');
  const wrote = tandem(['secret', '--out', file]);
  assert.equal(wrote.code, 0, wrote.stderr);
  assert.equal(statSync(file).mode & 0o777, 0o600);
  const again = tandem(['secret', '--out', file]);
  assert.equal(again.code, 2, 'an existing secret is kept unless --force');
  assert.match(again.stderr, /--force/);
  // the file satisfies the rule: the node gets past the secret and fails on its port instead,
  // one this process holds (a low port would not do: root may bind it, and the node would run)
  const holder = createServer();
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  try {
    const port = (holder.address() as AddressInfo).port;
    const taken = tandem(['node', '--secret-file', file, '--listen', `127.0.0.1:${port}`]);
    assert.notEqual(taken.code, 0, 'the node exits: its port is taken');
    assert.doesNotMatch(taken.stderr, /SECRET/);
    assert.match(taken.stderr, /EADDRINUSE|in use/i, taken.stderr);
  } finally {
    holder.close();
  }
});

test('the model path is checked before any node starts', () => {
  const bench = tandem(['bench', 'cluster', 'nope.gguf', '--nodes', '2']);
  assert.equal(bench.code, 2, bench.stderr);
  assert.match(
    bench.stderr,
    /MODEL_FORMAT_NOT_FOUND.*model \/.*\/nope\.gguf \(from 'nope\.gguf'\) does not exist/,
  );
  assert.doesNotMatch(bench.stderr, /starting/);
  const run = tandem(['run', '/nope.gguf', '--nodes', '2', '--prompt-tokens', '1,2']);
  assert.equal(run.code, 2, run.stderr);
  assert.match(run.stderr, /MODEL_FORMAT_NOT_FOUND/);
  assert.doesNotMatch(run.stderr, /starting/);
});

test('run reads the prompt from stdin, says the weights are random, and stops at the context with length', () => {
  const piped = tandem(['run', model(), '--max-tokens', '3', '--temperature', '0', '--threads', '1'], {
    input: 'Once upon a time\n',
  });
  assert.equal(piped.code, 0, piped.stderr);
  assert.match(piped.stderr, /has RANDOM weights \(written by `tandem make-model`\)/);
  assert.match(piped.stderr, /\d+ prompt tokens, 3 generated/);
  const given = tandem([
    'run',
    model(),
    '--prompt',
    'Once upon a time',
    '--max-tokens',
    '3',
    '--temperature',
    '0',
    '--threads',
    '1',
    '--json',
  ]);
  const fromStdin = tandem(
    ['run', model(), '--max-tokens', '3', '--temperature', '0', '--threads', '1', '--json'],
    {
      input: 'Once upon a time\n',
    },
  );
  assert.equal(given.code, 0, given.stderr);
  assert.deepEqual(JSON.parse(fromStdin.stdout).tokens, JSON.parse(given.stdout).tokens);
  const empty = tandem(['run', model(), '--max-tokens', '3']);
  assert.equal(empty.code, 3);
  assert.match(
    empty.stderr,
    /give exactly one of --prompt and --prompt-tokens.*\n.*pipe the prompt on stdin/,
  );
});

test(
  'run --nodes: --max-tokens past the context ends with length before any node starts; PAR_NO_FIT names the limit',
  { timeout: 120_000 },
  async () => {
    const limits: string[] = [];
    const r = await runDistributed({
      model: model(),
      nodes: 1,
      prompt: [1, 2, 3],
      maxTokens: 100,
      contextLength: 16,
      threads: 1,
      onContextLimit: (asked, fits, context) => limits.push(`${asked} ${fits} ${context}`),
    });
    assert.deepEqual(limits, ['100 14 16']);
    assert.equal(r.tokens.length, 14);
    assert.equal(r.stopReason, 'length');
    await assert.rejects(
      runDistributed({ model: model(), nodes: 1, prompt: [1, 2], maxTokens: 2, memLimit: 4096, threads: 1 }),
      (e) =>
        isTandemError(e, 'PAR_NO_FIT') &&
        /the limits come from rank 0 \(127\.0\.0\.1:\d+\): the run's --mem-limit \(raise it\)/.test(
          e.message,
        ),
    );
  },
);

test(
  'the multi-machine flow as the README writes it: a secret file, nodes, a hostfile, bench cluster --hosts and run --hosts',
  { timeout: 180_000 },
  async () => {
    const secretFile = join(dir, 'flow.secret');
    assert.equal(tandem(['secret', '--out', secretFile]).code, 0);
    const secret = readFileSync(secretFile, 'utf8').trim();
    const nodes = await launchLocalNodes(3, { secret, threads: 1, once: false });
    try {
      const hosts = join(dir, 'flow-hosts.txt');
      writeFileSync(hosts, nodes.addresses.map((a) => `${a} mem=1G`).join('\n') + '\n');
      const run = await tandemAsync([
        'run',
        model(),
        '--hosts',
        hosts,
        '--secret-file',
        secretFile,
        '--prompt-tokens',
        '1,2,3',
        '--max-tokens',
        '2',
        '--temperature',
        '0',
        '--json',
      ]);
      assert.equal(run.code, 0, run.stderr);
      assert.equal((JSON.parse(run.stdout) as { tokens: number[] }).tokens.length, 2);
      const bench = await tandemAsync([
        'bench',
        'cluster',
        model(),
        '--hosts',
        hosts,
        '--secret-file',
        secretFile,
        '--prompt-tokens',
        '4',
        '--tokens',
        '2',
        '--repeat',
        '1',
        '--no-ceiling',
      ]);
      assert.equal(bench.code, 0, bench.stderr);
      assert.match(bench.stdout, /best of 1 alternated round\(s\) of each, after a warm-up/);
      // one line says why when the split measured slower than one node, and only then
      const [head, , split] = bench.stdout.split('\n') as [string, string, string];
      const column = head
        .trim()
        .split(/\s{2,}/)
        .indexOf('decode x');
      const speedup = Number(split.trim().split(/\s{2,}/)[column]);
      assert.ok(Number.isFinite(speedup), bench.stdout);
      assert.equal(/why the split is slower here/.test(bench.stdout), speedup < 1, bench.stdout);
      assert.doesNotMatch(bench.stderr, /starting \d+ local node/);
      // a limit from the hostfile's mem= is named as such, with what to raise
      const small = join(dir, 'flow-small.txt');
      writeFileSync(small, `${nodes.addresses[0]} mem=4K\n`);
      const noFit = await tandemAsync([
        'run',
        model(),
        '--hosts',
        small,
        '--secret-file',
        secretFile,
        '--prompt-tokens',
        '1,2',
      ]);
      assert.equal(noFit.code, 2, noFit.stderr);
      assert.match(
        noFit.stderr,
        /PAR_NO_FIT.*the limits come from rank 0 .*the hostfile's mem= \(raise it on that line\)/,
      );
    } finally {
      await nodes.stop();
    }
  },
);

/** tandem() without blocking this process's event loop (the nodes above run in it). */
function tandemAsync(
  args: readonly string[],
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const env = { ...process.env };
  delete env.TANDEM_SECRET;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [tandemBin, ...args], {
      cwd: dir,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 150_000);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}
