import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NetnsRig, rigUnavailable, sweepStaleNamespaces } from './netns-rig.js';
import { makeTestModelFile, PROMPT } from './parallel-models.js';

/*
 * Members that know no address: the coordinator and 2 members are network namespaces on one
 * switch; the members run `tandem node --discover` and find the coordinator's cluster port by
 * an authenticated probe to the link-local multicast group; a member with another secret
 * finds nothing and joins nothing. The coordinator listens on every address, so its answer
 * names the address of the interface the probe came in on.
 */

const skip = rigUnavailable();
if (!skip) sweepStaleNamespaces();
const env = { ...process.env, TANDEM_SECRET: 'netns-discover-secret-0123456789', TANDEM_SPEED_PROBE: '0' };
let dir = '';
let path = '';
let client = '';

before(async () => {
  if (skip) return;
  dir = mkdtempSync(join(tmpdir(), 'tandem-cluster-discover-'));
  path = await makeTestModelFile(dir, 'llama', 'llama', 'q8_0');
  // Runs in the coordinator's namespace: one greedy completion, then the cluster view.
  client = join(dir, 'client.mjs');
  writeFileSync(
    client,
    `const [url, prompt] = process.argv.slice(2);
const res = await fetch(url + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ prompt: JSON.parse(prompt), max_tokens: 8, temperature: 0 }), signal: AbortSignal.timeout(60000) });
const body = await res.json();
const cluster = await (await fetch(url + '/v1/cluster')).json();
process.stdout.write(JSON.stringify({ status: res.status, text: body.choices?.[0]?.text ?? null, cluster }) + '\\n');
`,
  );
});
after(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test(
  'members started with --discover find the coordinator on the local network; another secret finds nothing',
  { skip, timeout: 180_000 },
  async () => {
    const rig = new NetnsRig();
    try {
      const hosts = ['c', 'm1', 'm2', 'x'];
      rig.switched(hosts, '10.78.0');
      const serve = rig.tandem(
        'c',
        ['serve', path, '--cluster', '0.0.0.0:7110', '--min-members', '2', '--host', '10.78.0.1'],
        env,
      );
      serve.child.stdout?.resume();
      const stranger = rig.tandem('x', ['node', '--discover', '--threads', '1'], {
        ...env,
        TANDEM_SECRET: 'another-cluster-secret-0123456789',
      });
      for (const h of ['m1', 'm2']) rig.tandem(h, ['node', '--discover', '--threads', '1'], env);
      const listening = Date.now() + 60_000;
      while (
        !/listening on http/.test(serve.stderr) &&
        Date.now() < listening &&
        serve.exitCode === undefined
      )
        await new Promise((r) => setTimeout(r, 100));
      assert.match(serve.stderr, /listening on http/, serve.stderr);
      assert.match(serve.stderr, /answering discovery/);

      const run = rig.node('c', [client, 'http://10.78.0.1:8080', JSON.stringify(PROMPT)], env);
      const out = await run.waitFor((l) => 'status' in l, 60_000, 'the completion');
      assert.equal(out.status, 200, JSON.stringify(out));
      const cluster = out.cluster as { members: { address: string; state: string }[] };
      assert.deepEqual(cluster.members.map((m) => `${m.address.split(':')[0]} ${m.state}`).sort(), [
        '10.78.0.2 alive',
        '10.78.0.3 alive',
      ]);
      const probed = Date.now() + 15_000;
      while (!/no coordinator answered discovery/.test(stranger.stderr) && Date.now() < probed)
        await new Promise((r) => setTimeout(r, 100));
      assert.match(stranger.stderr, /no coordinator answered discovery/);
      assert.doesNotMatch(stranger.stderr, /connected to the coordinator/);
    } finally {
      await rig.cleanup();
    }
  },
);
