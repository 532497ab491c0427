import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadVerbs } from '../fabric/rdma-verbs.js';
import { listDevices } from '../fabric/rdma-context.js';
import { runTandem, tempModel } from './testing.js';

/**
 * `--provider rdma` on a host without a verbs device (this machine; the soft-RoCE guest has
 * one): every command that starts processes here refuses up front with the provider's typed
 * error, naming the command and why, before any node or rank starts.
 */
const verbs = loadVerbs();
const skip = verbs !== undefined && listDevices(verbs).length > 0 ? 'an RDMA device is present' : false;
const model = tempModel('tandem-provider-check-', { arch: 'llama', shape: 'tiny', type: 'q8_0', seed: 5 });

test(
  '--provider rdma without a device is FABRIC_PROVIDER_UNAVAILABLE before anything starts',
  { skip },
  () => {
    const cases: [string, string[]][] = [
      ['run', ['run', model(), '--nodes', '2', '--provider', 'rdma', '--prompt', 'hi', '--max-tokens', '1']],
      ['serve', ['serve', model(), '--nodes', '2', '--provider', 'rdma', '--port', '0']],
      ['chat', ['chat', model(), '--nodes', '2', '--provider', 'rdma']],
      ['bench cluster', ['bench', 'cluster', model(), '--nodes', '2', '--provider', 'rdma']],
      ['bench collectives', ['bench', 'collectives', '--provider', 'rdma', '--sizes', '8']],
    ];
    for (const [name, args] of cases) {
      const r = runTandem(args, { timeoutMs: 60_000 });
      assert.equal(r.code, 4, `${name}: exits with the system category's code\n${r.stderr}`);
      assert.ok(
        r.stderr.startsWith(`error [FABRIC_PROVIDER_UNAVAILABLE]: ${name}: --provider rdma: `),
        `${name}: ${r.stderr}`,
      );
      assert.match(r.stderr, /rdma is unavailable|no RDMA device/, `${name} says why`);
      assert.match(r.stderr, /hint: .*--provider tcp/, `${name} says what to do`);
      assert.doesNotMatch(r.stderr, /starting \d+ local node|rank \d+ exited/, `${name} started nothing`);
    }
  },
);

test(
  'doctor --mode rdma without a device: the rdma finding says so, no port check, one verdict',
  { skip },
  () => {
    // No cluster config: only this host is checked.
    const env = { ...process.env, TANDEM_CONFIG: '/nonexistent/tandem-cluster.json' };
    const r = runTandem(['doctor', '--mode', 'rdma', '--json'], { env, timeoutMs: 60_000 });
    assert.equal(r.code, 1, r.stderr);
    const out = JSON.parse(r.stdout) as { findings: { check: string; severity: string }[] };
    assert.deepEqual(
      out.findings.filter((f) => f.check === 'rdma').map((f) => f.severity),
      ['error'],
    );
    assert.equal(out.findings.filter((f) => f.check === 'rdma-port').length, 0);
  },
);
