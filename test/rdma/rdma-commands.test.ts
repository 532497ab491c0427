import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { runTandem, tandemBin, tempModel } from '../../src/cli/testing.js';

/**
 * `--provider rdma` through the commands, on a real verbs device (the soft-RoCE guest): a 2-node
 * tensor-parallel `tandem run --hosts` over rdma gives the same greedy tokens as over tcp and as
 * one node on a generated model, and `tandem bench collectives --provider rdma` prints a row per
 * size. Every process opens the device TANDEM_RDMA_DEVICE names.
 *
 * Under the guest's software emulation one CLI process takes up to a minute to start and stalls
 * for seconds at a time: the job (guest-rxe.sh) raises the cluster's silence limit
 * (TANDEM_CLUSTER_SILENCE_MS) and `--nodes`' wait for each node (TANDEM_NODE_START_MS), which
 * every process here inherits. qemu's default CPU model has no WebAssembly SIMD, so every node
 * runs the reference kernels: the two `tandem node` processes this test starts for --hosts,
 * and the local nodes of `--nodes` (`--kernels reference`).
 */
const device = process.env['TANDEM_RDMA_DEVICE'];
const skip = device === undefined ? 'needs an RDMA device (TANDEM_RDMA_DEVICE; npm run test:rdma)' : false;
const model = tempModel('tandem-rdma-commands-', { arch: 'llama', shape: 'tiny', type: 'f32', seed: 11 });
const LIMIT_MS = 900_000;
const SECRET = 'rdma-commands-secret-0123456789';
const GENERATE = [
  '--threads',
  '1',
  '--prompt-tokens',
  '1,450,2996',
  '--temperature',
  '0',
  '--max-tokens',
  '6',
  '--json',
];

/** A `tandem node` on 127.0.0.1; resolves with its address once it listens. */
function startNode(): { proc: ChildProcess; address: Promise<string> } {
  const args = [
    'node',
    '--listen',
    '127.0.0.1:0',
    '--announce',
    '--threads',
    '1',
    '--speed',
    '1',
    '--kernels',
    'reference',
  ];
  const proc = spawn(process.execPath, [tandemBin, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, TANDEM_SECRET: SECRET },
  });
  const address = (async () => {
    for await (const line of createInterface({ input: proc.stdout as Readable })) {
      const m = /^listening (\S+)$/.exec(line);
      if (m) return m[1] as string;
    }
    throw new Error('tandem node exited before it listened');
  })();
  return { proc, address };
}

function generate(args: string[], what: string): number[] {
  const r = runTandem([...args, ...GENERATE], {
    env: { ...process.env, TANDEM_SECRET: SECRET },
    timeoutMs: LIMIT_MS,
  });
  assert.equal(r.code, 0, `${what}: ${r.stderr}`);
  const out = JSON.parse(r.stdout) as { tokens: number[] };
  console.log(`# ${what}: tokens ${out.tokens.join(',')}`);
  return out.tokens;
}

test(
  'rdma: tandem run --hosts and --nodes (2 nodes) --provider rdma give the greedy tokens of tcp and of one node',
  { skip, timeout: 4 * LIMIT_MS },
  async () => {
    const nodes = [startNode(), startNode()];
    const dir = mkdtempSync(join(tmpdir(), 'tandem-rdma-hosts-'));
    try {
      const hosts = join(dir, 'hosts.txt');
      writeFileSync(hosts, (await Promise.all(nodes.map((n) => n.address))).join('\n') + '\n');
      const one = generate(['run', model(), '--kernels', 'reference'], 'one node');
      assert.equal(one.length, 6);
      for (const provider of ['tcp', 'rdma']) {
        const args = ['run', model(), '--hosts', hosts, '--parallel', 'tp', '--provider', provider];
        assert.deepEqual(generate(args, `2 nodes over ${provider}`), one);
      }
      const local = ['run', model(), '--nodes', '2', '--kernels', 'reference', '--parallel', 'tp'];
      assert.deepEqual(generate([...local, '--provider', 'rdma'], '--nodes 2 over rdma'), one);
    } finally {
      for (const n of nodes) n.proc.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

test(
  'rdma: tandem bench collectives --provider rdma prints a row per size',
  { skip, timeout: LIMIT_MS },
  () => {
    const sizes = ['8', '4096', '1048576'];
    const r = runTandem(
      [
        'bench',
        'collectives',
        '--provider',
        'rdma',
        '--ranks',
        '2',
        '--sizes',
        sizes.join(','),
        '--iterations',
        '5',
        '--json',
      ],
      { timeoutMs: LIMIT_MS },
    );
    assert.equal(r.code, 0, r.stderr);
    const rows = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { provider: string; bytes: number; time_us: number });
    for (const row of rows) console.log(`# ${JSON.stringify(row)}`);
    assert.deepEqual(
      rows.map((x) => [x.provider, String(x.bytes)]),
      sizes.map((s) => ['rdma', s]),
    );
    for (const row of rows) assert.ok(row.time_us > 0, JSON.stringify(row));
  },
);
