import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeStreamClient } from './netns-stream-client.js';
import { NetnsRig, rigUnavailable, sweepStaleNamespaces } from './netns-rig.js';
import { makeTestModelFile, PROMPT } from './parallel-models.js';

/*
 * A cable pulled: the coordinator and 3 members are network namespaces on one switch (a
 * bridge in a fifth namespace); `ip link set down` on one member's cable cuts it off. The
 * coordinator hears nothing from it, marks it dead within 3 s, places the model on the other
 * two, and the 4 streams running go on with the texts they have without the failure.
 */

const skip = rigUnavailable();
if (!skip) sweepStaleNamespaces();
const env = { ...process.env, TANDEM_SECRET: 'netns-cluster-secret-0123456789', TANDEM_SPEED_PROBE: '0' };
let dir = '';
let path = '';
let client = '';

before(async () => {
  if (skip) return;
  dir = mkdtempSync(join(tmpdir(), 'tandem-cluster-netns-'));
  path = await makeTestModelFile(dir, 'llama', 'llama', 'q8_0');
  client = writeStreamClient(dir);
});
after(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const prompts = Array.from({ length: 4 }, (_, i) => PROMPT.map((t) => ((t + 29 * i) % 500) + 3));

test(
  'a member whose cable goes down is dead within 3 s; the model is placed on the others and the streams go on',
  { skip, timeout: 240_000 },
  async () => {
    const rig = new NetnsRig();
    try {
      const hosts = ['c', 'm1', 'm2', 'm3'];
      const cables = rig.switched(hosts, '10.77.0');
      const serve = rig.tandem(
        'c',
        [
          'serve',
          path,
          '--cluster',
          '10.77.0.1:7110',
          '--min-members',
          '3',
          '--host',
          '10.77.0.1',
          '--port',
          '8080',
          '--threads',
          '1',
          '--slots',
          '4',
        ],
        env,
      );
      for (const h of ['m1', 'm2', 'm3'])
        rig.tandem(h, ['node', '--join', '10.77.0.1:7110', '--threads', '1'], env);
      const listening = Date.now() + 60_000;
      while (
        !/listening on http/.test(serve.stderr) &&
        Date.now() < listening &&
        serve.exitCode === undefined
      )
        await new Promise((r) => setTimeout(r, 100));
      assert.match(serve.stderr, /listening on http/, serve.stderr);

      const reference = rig.node('c', [client, 'http://10.77.0.1:8080', JSON.stringify(prompts)], env);
      const ref = await reference.waitFor((l) => Array.isArray(l.texts), 60_000, 'the reference texts');
      const alone = ref.texts as string[];
      assert.ok(
        alone.every((t) => !t.startsWith('ERROR')),
        JSON.stringify(alone),
      );

      const run = rig.node('c', [client, 'http://10.77.0.1:8080', JSON.stringify(prompts)], env);
      await run.waitFor(
        (l) => typeof l.chunk === 'number' && run.lines.length >= 12,
        60_000,
        'a quarter of the tokens',
      );
      const downAt = Date.now();
      rig.setLink('m2', cables[2]!.bIf, false);
      const end = await run.waitFor((l) => Array.isArray(l.texts), 90_000, 'the streams to end');
      assert.deepEqual(end.texts, alone, 'each text as without the failure');
      const cluster = end.cluster as {
        members: { address: string; state: string }[];
        events: { kind: string; atMs: number; message: string }[];
        placement: { ranks: unknown[] } | null;
      };
      const lost = cluster.events.find((e) => e.kind === 'lost');
      assert.ok(lost && /10\.77\.0\.3/.test(lost.message), JSON.stringify(cluster.events));
      assert.ok(lost.atMs - downAt <= 3000 + 1000, `lost ${lost.atMs - downAt} ms after the link went down`);
      assert.equal(cluster.placement?.ranks.length, 2);
      assert.deepEqual(cluster.members.map((m) => m.state).sort(), ['alive', 'alive', 'dead']);
    } finally {
      await rig.cleanup();
    }
  },
);
