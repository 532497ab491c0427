import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { execFileSync, spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NetnsRig, rigUnavailable, sweepStaleNamespaces, type RigProcess } from './netns-rig.js';
import { canonicalGraph, classify, type Link, type TopologyGraph } from '../../src/topology/index.js';

/*
 * Discovery and init end to end: hosts are network namespaces, cables veth pairs. Each agent
 * prints the graph it sees as JSON lines; every agent must find exactly the cabled graph.
 */

const skip = rigUnavailable();
if (!skip) sweepStaleNamespaces();
const secretDir = mkdtempSync(join(tmpdir(), 'tandem-netns-'));
const secretFile = join(secretDir, 'cluster.secret');
writeFileSync(secretFile, 'netns-test-secret-0123456789abcdef\n');
process.on('exit', () => rmSync(secretDir, { recursive: true, force: true }));

/** Startup of several tsx processes on two shared cores is slow; agreement itself takes ~1 s. */
const settleMs = 40_000;

function expected(rig: NetnsRig, hosts: string[], without: readonly string[] = []): TopologyGraph {
  const links: Link[] = rig.cables
    .filter((c) => !without.includes(`${c.a}-${c.b}`))
    .map((c) => ({ a: c.a, aPort: c.aIf, b: c.b, bPort: c.bIf, kind: 'ethernet' }));
  return { hosts, links };
}

const seen = (line: Record<string, unknown>): string =>
  canonicalGraph({ hosts: line.hosts as string[], links: (line.links ?? []) as Link[] });

async function allSee(
  agents: RigProcess[],
  graph: TopologyGraph,
  ms: number,
  what: string,
): Promise<Record<string, unknown>[]> {
  const want = canonicalGraph(graph);
  return Promise.all(agents.map((a) => a.waitFor((l) => seen(l) === want && l.agreed === true, ms, what)));
}

async function withRig(
  hosts: string[],
  cables: [string, string][],
  body: (rig: NetnsRig, agents: RigProcess[]) => Promise<void>,
  measure = false,
): Promise<void> {
  const rig = new NetnsRig();
  try {
    for (const h of hosts) rig.addHost(h);
    for (const [a, b] of cables) rig.cable(a, b);
    const agents = hosts.map((h) =>
      rig.tandem(h, [
        'topology',
        '--agent',
        '--host',
        h,
        '--secret-file',
        secretFile,
        ...(measure ? [] : ['--no-measure']),
      ]),
    );
    await body(rig, agents);
  } finally {
    await rig.cleanup();
  }
}

test("namespaces left by a killed run are swept, live runs' are kept", { skip }, async () => {
  const dead = spawnSync(process.execPath, ['-e', '0']).pid as number;
  const stale = `td${dead}r0-zz`;
  execFileSync('ip', ['netns', 'add', stale], { timeout: 10_000 });
  const live = new NetnsRig();
  try {
    live.addHost('keep');
    assert.ok(sweepStaleNamespaces().includes(stale));
    assert.ok(!existsSync(`/run/netns/${stale}`));
    assert.ok(existsSync(`/run/netns/${live.ns('keep')}`));
  } finally {
    if (existsSync(`/run/netns/${stale}`)) execFileSync('ip', ['netns', 'del', stale], { timeout: 10_000 });
    await live.cleanup();
  }
});

test(
  'ring of 3: discovered exactly, measured, a cut cable shows within 3 s and so does its return',
  { skip },
  async () => {
    const hosts = ['a', 'b', 'c'];
    await withRig(
      hosts,
      [
        ['a', 'b'],
        ['b', 'c'],
        ['c', 'a'],
      ],
      async (rig, agents) => {
        const full = expected(rig, hosts);
        await allSee(agents, full, settleMs, 'the ring');
        const measured = await agents[0]!.waitFor(
          (l) =>
            (l.links as Link[]).length === 3 &&
            (l.links as Link[]).every((x) => x.latencyUs! > 0 && x.bandwidthGBps! > 0),
          settleMs,
          'measured links',
        );
        assert.equal(measured.class, 'full-mesh', 'three hosts in a ring are every pair cabled');
        for (const l of measured.links as Link[])
          assert.deepEqual([l.kind, l.speedGbps], ['ethernet', 10], 'a veth is 10 Gb/s ethernet in sysfs');
        rig.setLink('a', 't-b', false);
        const cut = expected(rig, hosts, ['a-b']);
        const lines = await allSee(agents, cut, 3000, 'the cut cable');
        assert.equal(lines[2]?.class, 'line');
        assert.deepEqual(lines[2]?.routes, [{ from: 'a', to: 'b', via: ['c'] }]);
        rig.setLink('a', 't-b', true);
        await allSee(agents, full, 3000, 'the restored cable');
      },
      true,
    );
  },
);

test('mesh of 4, line of 3 and a star through a hub are each found exactly', { skip }, async () => {
  const shapes: { hosts: string[]; cables: [string, string][]; kind: string }[] = [
    {
      hosts: ['a', 'b', 'c', 'd'],
      cables: [
        ['a', 'b'],
        ['a', 'c'],
        ['a', 'd'],
        ['b', 'c'],
        ['b', 'd'],
        ['c', 'd'],
      ],
      kind: 'full-mesh',
    },
    {
      hosts: ['a', 'b', 'c'],
      cables: [
        ['a', 'b'],
        ['b', 'c'],
      ],
      kind: 'line',
    },
    {
      hosts: ['hub', 'x', 'y', 'z'],
      cables: [
        ['hub', 'x'],
        ['hub', 'y'],
        ['hub', 'z'],
      ],
      kind: 'star',
    },
  ];
  for (const shape of shapes) {
    await withRig(shape.hosts, shape.cables, async (rig, agents) => {
      const graph = expected(rig, shape.hosts);
      assert.equal(classify(graph).kind, shape.kind);
      const lines = await allSee(agents, graph, settleMs, `the ${shape.kind}`);
      for (const l of lines) assert.equal(l.class, shape.kind);
      if (shape.kind === 'star') assert.equal(lines[0]?.hub, 'hub');
      if (shape.kind === 'line') assert.deepEqual(lines[0]?.order, ['a', 'b', 'c']);
    });
  }
});

test('agents with a different secret are ignored', { skip }, async () => {
  const otherDir = mkdtempSync(join(tmpdir(), 'tandem-netns-other-'));
  const other = join(otherDir, 'other.secret');
  writeFileSync(other, 'a-completely-different-secret-000\n');
  const rig = new NetnsRig();
  try {
    for (const h of ['a', 'b', 'c']) rig.addHost(h);
    rig.cable('a', 'b');
    rig.cable('b', 'c');
    const a = rig.tandem('a', [
      'topology',
      '--agent',
      '--host',
      'a',
      '--secret-file',
      secretFile,
      '--no-measure',
    ]);
    const b = rig.tandem('b', [
      'topology',
      '--agent',
      '--host',
      'b',
      '--secret-file',
      secretFile,
      '--no-measure',
    ]);
    const intruder = rig.tandem('c', [
      'topology',
      '--agent',
      '--host',
      'c',
      '--secret-file',
      other,
      '--no-measure',
    ]);
    const pair = {
      hosts: ['a', 'b'],
      links: [{ a: 'a', aPort: 't-b', b: 'b', bPort: 't-a', kind: 'ethernet' as const }],
    };
    await allSee([a, b], pair, settleMs, 'the pair');
    await intruder.waitFor((l) => Array.isArray(l.hosts), settleMs, 'the intruder running');
    // Give the intruder's hellos time to arrive; the pair's graph must stay without it.
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(seen(b.lines[b.lines.length - 1]!), canonicalGraph(pair));
    assert.deepEqual(intruder.lines[intruder.lines.length - 1]?.hosts, ['c']);
  } finally {
    await rig.cleanup();
    rmSync(otherDir, { recursive: true, force: true });
  }
});

test("a bridge that joins two of a host's cables is reported as a loop", { skip }, async () => {
  const rig = new NetnsRig();
  try {
    rig.addHost('a');
    rig.addHost('sw');
    rig.cable('a', 'sw');
    rig.cable('a', 'sw');
    const agent = rig.tandem('a', [
      'topology',
      '--agent',
      '--host',
      'a',
      '--secret-file',
      secretFile,
      '--no-measure',
    ]);
    await agent.waitFor((l) => Array.isArray(l.bridgeLoops), settleMs, 'the agent running');
    assert.deepEqual(agent.lines[agent.lines.length - 1]?.bridgeLoops, [], 'no bridge yet, no loop');
    rig.bridge('sw', ['t-a', 't-a-2']);
    const line = await agent.waitFor(
      (l) => (l.bridgeLoops as unknown[]).length === 2,
      5000,
      'the loop through the bridge',
    );
    assert.deepEqual(line.bridgeLoops, [
      { sentOn: 't-sw', heardOn: 't-sw-2' },
      { sentOn: 't-sw-2', heardOn: 't-sw' },
    ]);
    assert.deepEqual(line.hosts, ['a'], 'a host hearing itself is not a neighbour');
  } finally {
    await rig.cleanup();
  }
});

test(
  'tandem init --mode=tcp --topology=ring --apply: every host agrees, addresses one /30 per cable, writes the config',
  { skip },
  async () => {
    const rig = new NetnsRig();
    const dir = mkdtempSync(join(tmpdir(), 'tandem-init-'));
    try {
      const hosts = ['a', 'b', 'c'];
      for (const h of hosts) rig.addHost(h);
      rig.cable('a', 'b');
      rig.cable('b', 'c');
      rig.cable('c', 'a');
      const procs = hosts.map((h) =>
        rig.tandem(h, [
          'init',
          '--mode=tcp',
          '--topology=ring',
          '--apply',
          '--expect',
          '3',
          '--wait',
          '45',
          '--host',
          h,
          '--secret-file',
          secretFile,
          '--config',
          join(dir, `${h}.json`),
          '--no-measure',
          '--json',
        ]),
      );
      let timer: NodeJS.Timeout | undefined;
      const codes = await Promise.race([
        Promise.all(procs.map((p) => p.exited)),
        new Promise<never>(
          (_, reject) =>
            (timer = setTimeout(() => reject(new Error('init did not finish within 60 s')), 60_000)),
        ),
      ]).finally(() => clearTimeout(timer));
      assert.deepEqual(codes, [0, 0, 0], procs.map((p) => p.stderr).join('\n---\n'));
      const configs = hosts.map(
        (h) => JSON.parse(readFileSync(join(dir, `${h}.json`), 'utf8')) as Record<string, unknown>,
      );
      for (const [i, c] of configs.entries()) {
        assert.equal(c.self, hosts[i]);
        assert.equal(c.algorithm, 'ring');
        assert.deepEqual(c.ring, ['a', 'b', 'c']);
        assert.deepEqual(c.connectivity, {
          size: 3,
          edges: [
            [0, 1],
            [0, 2],
            [1, 2],
          ],
        });
        const strip = ({
          self: _s,
          createdAt: _c,
          ...rest
        }: Record<string, unknown>): Record<string, unknown> => rest;
        assert.deepEqual(strip(c), strip(configs[0]!), 'every host wrote the same cluster');
      }
      const links = configs[0]!.links as {
        a: string;
        aPort: string;
        b: string;
        bPort: string;
        subnet: string;
        aAddress: string;
        bAddress: string;
      }[];
      assert.deepEqual(
        links.map((l) => l.subnet),
        ['10.99.0.0/30', '10.99.0.4/30', '10.99.0.8/30'],
      );
      for (const l of links) {
        assert.deepEqual(rig.addresses(l.a).get(l.aPort), [`${l.aAddress}/30`]);
        assert.deepEqual(rig.addresses(l.b).get(l.bPort), [`${l.bAddress}/30`]);
      }
      assert.match(procs[0]!.stderr, /ip addr replace 10\.99\.0\.\d\/30 dev t-[bc]/);
      assert.match(procs[0]!.stderr, /verified: t-b 10\.99\.0\.\d+ -> b/);
      const show = rig.tandem('b', [
        'topology',
        '--config',
        join(dir, 'b.json'),
        '--json',
        '--export-mlx',
        join(dir, 'mlx.json'),
      ]);
      assert.equal(await show.exited, 0, show.stderr);
      const shown = show.lines[0] as { class: string; links: { subnet: string }[] };
      assert.equal(shown.class, 'full-mesh');
      assert.deepEqual(
        shown.links.map((l) => l.subnet),
        ['10.99.0.0/30', '10.99.0.4/30', '10.99.0.8/30'],
      );
      const mlx = JSON.parse(readFileSync(join(dir, 'mlx.json'), 'utf8')) as {
        hosts: { ssh: string; ips: string[]; rdma: unknown[] }[];
      };
      assert.deepEqual(
        mlx.hosts.map((h) => h.ssh),
        ['a', 'b', 'c'],
      );
      assert.deepEqual(mlx.hosts[0]?.ips, [links[0]!.aAddress, links[1]!.aAddress]);
      assert.deepEqual(mlx.hosts[0]?.rdma, [null, 'rdma_t-b', 'rdma_t-c']);
    } finally {
      await rig.cleanup();
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
