import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runTandem, tempModel } from '../../src/cli/testing.js';

/**
 * `--provider rdma` through the commands, on a real verbs device (the soft-RoCE guest): a 2-node
 * tensor-parallel `tandem run --nodes 2` over rdma gives the same greedy tokens as over tcp on a
 * generated model, and `tandem bench collectives --provider rdma` prints a row per size. Every
 * process opens the device TANDEM_RDMA_DEVICE names. Deadlines are for software emulation, where
 * one CLI process takes up to a minute to start.
 */
const device = process.env['TANDEM_RDMA_DEVICE'];
const skip = device === undefined ? 'needs an RDMA device (TANDEM_RDMA_DEVICE; npm run test:rdma)' : false;
const model = tempModel('tandem-rdma-commands-', { arch: 'llama', shape: 'tiny', type: 'f32', seed: 11 });
const LIMIT_MS = 900_000;

function generate(provider: string): number[] {
  const args = ['run', model(), '--nodes', '2', '--parallel', 'tp', '--provider', provider, '--threads', '1'];
  const r = runTandem(
    [...args, '--prompt-tokens', '1,450,2996', '--temperature', '0', '--max-tokens', '6', '--json'],
    {
      timeoutMs: LIMIT_MS,
    },
  );
  assert.equal(r.code, 0, `run --provider ${provider}: ${r.stderr}`);
  const out = JSON.parse(r.stdout) as { tokens: number[] };
  console.log(`# run --nodes 2 --provider ${provider}: tokens ${out.tokens.join(',')}`);
  return out.tokens;
}

test(
  'rdma: tandem run --nodes 2 --provider rdma gives the greedy tokens of tcp',
  { skip, timeout: 2 * LIMIT_MS },
  () => {
    const tcp = generate('tcp');
    assert.equal(tcp.length, 6);
    assert.deepEqual(generate('rdma'), tcp);
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
