import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { diagnose, formatFindings, hasErrors, type Finding } from './doctor.js';
import { probeHost } from './probes/host.js';
import type { HostReport } from './probes/types.js';
import { graphOf } from './testing.js';

const dir = new URL('../../test/fixtures/topology/macos/', import.meta.url);
const fixture = (name: string): string => readFileSync(new URL(name, dir), 'utf8');

async function studio(rdmaStatus = 'rdma-ctl-status-enabled.txt'): Promise<HostReport> {
  const outputs: Record<string, string> = {
    networksetup: fixture('studio-a-networksetup-listallhardwareports.txt'),
    system_profiler: fixture('studio-a-system-profiler-thunderbolt.json'),
    ifconfig: fixture('studio-a-ifconfig.txt'),
    rdma_ctl: fixture(rdmaStatus),
    ibv_devinfo: fixture('ibv-devinfo.txt'),
  };
  const report = await probeHost(async (file) => outputs[file] ?? '', 'darwin');
  return { ...report, host: 'studio-a', tandemVersion: '0.1.0', timeMs: 1_700_000_000_000 };
}

function plainHost(host: string, extra: Partial<HostReport> = {}): HostReport {
  return {
    host,
    platform: 'linux',
    tandemVersion: '0.1.0',
    timeMs: 1_700_000_000_000,
    interfaces: [
      {
        name: 'eth1',
        up: true,
        carrier: true,
        kind: 'ethernet',
        mtu: 1500,
        ipv4: ['10.99.0.1'],
        ipv6LinkLocal: [],
      },
    ],
    rdma: { devices: [] },
    thunderbolt: [],
    notes: [],
    ...extra,
  };
}

const find = (fs: Finding[], check: string): Finding[] => fs.filter((f) => f.check === check);

test('RDMA disabled: an error that says to enable it from Recovery', async () => {
  const findings = diagnose({ report: await studio('rdma-ctl-status-disabled.txt'), mode: 'rdma' });
  const [f] = find(findings, 'rdma');
  assert.equal(f?.severity, 'error');
  assert.match(f?.fix ?? '', /Recovery.*rdma_ctl enable.*reboot/);
  assert.ok(hasErrors(findings));
});

test('studio sample: bridge loop risk, a Thunderbolt 4 cable, an RDMA interface without IPv4', async () => {
  const findings = diagnose({ report: await studio(), mode: 'rdma' });
  const bridge = find(findings, 'thunderbolt-bridge')[0];
  assert.equal(bridge?.severity, 'error');
  assert.match(bridge?.evidence ?? '', /en3, en4/);
  assert.match(bridge?.fix ?? '', /ifconfig bridge0 down/);
  const tb4 = find(findings, 'thunderbolt-speed');
  assert.equal(tb4.length, 1);
  assert.match(tb4[0]?.title ?? '', /Thunderbolt 3 \(en4\) runs at 40 Gb\/s/);
  const noIp = find(findings, 'rdma-ipv4');
  assert.deepEqual(
    noIp.map((f) => f.title),
    ['RDMA interface en3 has no IPv4 address'],
  );
  const inactive = find(findings, 'rdma-port');
  assert.deepEqual(
    inactive.map((f) => f.title),
    ['rdma_en4 is not active'],
    'en2 has no cable, so its port being down is fine',
  );
  assert.match(formatFindings(findings), /\d error\(s\), \d warning\(s\)\n$/);
  assert.deepEqual(find(findings, 'probe'), [], 'every tool of the sample answered');
});

test('a tool that could not run is reported, not hidden', () => {
  const r = plainHost('a', { notes: ['ibv_devinfo: spawn ibv_devinfo ENOENT'] });
  const [f] = find(diagnose({ report: r, mode: 'tcp' }), 'probe');
  assert.equal(f?.severity, 'info');
  assert.match(f?.evidence ?? '', /ENOENT/);
});

test('in tcp mode a Thunderbolt 4 cable is only a warning and RDMA is not required', async () => {
  const findings = diagnose({ report: await studio('rdma-ctl-status-disabled.txt'), mode: 'tcp' });
  assert.equal(find(findings, 'rdma')[0]?.severity, 'info');
  assert.equal(find(findings, 'thunderbolt-speed')[0]?.severity, 'warning');
});

test('peers: version mismatch, clock skew and MTU mismatch across a cable', () => {
  const a = plainHost('a');
  const b = plainHost('b', {
    tandemVersion: '0.2.0',
    timeMs: a.timeMs + 5000,
    interfaces: [
      {
        name: 'eth1',
        up: true,
        carrier: true,
        kind: 'ethernet',
        mtu: 9000,
        ipv4: ['10.99.0.2'],
        ipv6LinkLocal: [],
      },
    ],
  });
  const graph = {
    hosts: ['a', 'b'],
    links: [{ a: 'a', aPort: 'eth1', b: 'b', bPort: 'eth1', kind: 'ethernet' as const }],
  };
  const findings = diagnose({ report: a, peers: [b], mode: 'tcp', graph });
  assert.match(find(findings, 'version')[0]?.evidence ?? '', /0\.1\.0: a; 0\.2\.0: b/);
  assert.match(find(findings, 'clock')[0]?.title ?? '', /clock of b is 5\.0 s off/);
  assert.match(find(findings, 'mtu')[0]?.evidence ?? '', /a:eth1 mtu 1500, b:eth1 mtu 9000/);
  const ok = diagnose({ report: a, peers: [plainHost('b')], mode: 'tcp', graph });
  assert.ok(!hasErrors(ok));
  assert.equal(find(ok, 'peers')[0]?.severity, 'ok');
});

test('missing links for the chosen topology', () => {
  const line = graphOf('a-b b-c c-d');
  const mesh = diagnose({ report: plainHost('a'), mode: 'tcp', topology: 'mesh', graph: line });
  assert.match(find(mesh, 'topology')[0]?.title ?? '', /full mesh needs 3 more cable/);
  assert.equal(
    find(diagnose({ report: plainHost('a'), mode: 'tcp', topology: 'ring', graph: line }), 'topology')[0]
      ?.severity,
    'error',
  );
  assert.equal(
    find(diagnose({ report: plainHost('a'), mode: 'tcp', topology: 'auto', graph: line }), 'topology')[0]
      ?.severity,
    'ok',
  );
  assert.equal(
    find(
      diagnose({ report: plainHost('a'), mode: 'tcp', topology: 'ring', graph: graphOf('a-b b-c c-d d-a') }),
      'topology',
    )[0]?.severity,
    'ok',
  );
  assert.equal(
    find(diagnose({ report: plainHost('a'), mode: 'tcp', graph: graphOf('a-b c-d') }), 'topology')[0]
      ?.severity,
    'error',
  );
});

test('bridged cables between hosts that close a loop are found across the cluster', () => {
  const bridged = (host: string): HostReport =>
    plainHost(host, {
      interfaces: [
        { name: 'p0', up: true, carrier: true, kind: 'tb5', ipv4: [], ipv6LinkLocal: [] },
        { name: 'p1', up: true, carrier: true, kind: 'tb5', ipv4: [], ipv6LinkLocal: [] },
        { name: 'bridge0', up: true, kind: 'bridge', ipv4: [], ipv6LinkLocal: [], members: ['p0', 'p1'] },
      ],
    });
  const graph = graphOf('a-b b-c c-a');
  const findings = diagnose({
    report: bridged('a'),
    peers: [bridged('b'), bridged('c')],
    mode: 'tcp',
    graph,
  });
  const loops = find(findings, 'bridge-loop');
  assert.equal(loops.length, 1);
  assert.match(loops[0]?.title ?? '', /loop: (\w -> ){3}\w/);
});

test('a peer report of the wrong shape is INVALID_ARGUMENT naming the report and the field, not a TypeError', () => {
  const cases: [unknown, RegExp][] = [
    [{ a: 1 }, /^peer report 1 is not a host report: host must be a string \(it is missing\)$/],
    [null, /^peer report 1 is not a host report: the report must be an object \(got null\)$/],
    [[1], /the report must be an object \(got an array\)/],
    [
      { ...plainHost('b'), rdma: {} },
      /^peer report 1 \(host 'b'\) is not a host report: rdma\.devices must be an array \(it is missing\)$/,
    ],
    [
      { ...plainHost('b'), interfaces: [{ name: 'e', up: 'yes' }] },
      /interfaces\[0\]\.up must be true or false \(got "yes"\)/,
    ],
    [
      { ...plainHost('b'), thunderbolt: [{ receptacle: '1', peer: { name: 'x' } }] },
      /thunderbolt\[0\]\.peer\.domainUuid must be a string/,
    ],
  ];
  for (const [peer, message] of cases) {
    assert.throws(
      () => diagnose({ report: plainHost('a'), peers: [peer as HostReport], mode: 'tcp' }),
      (e: Error & { code?: string; hint?: string }) => {
        assert.equal(e.code, 'INVALID_ARGUMENT');
        assert.match(e.message, message);
        assert.match(e.hint ?? '', /tandem doctor --report/);
        return true;
      },
    );
  }
  assert.doesNotThrow(() =>
    diagnose({
      report: plainHost('a'),
      peers: [plainHost('b'), JSON.parse(JSON.stringify(plainHost('c'))) as HostReport],
      mode: 'tcp',
    }),
  );
});

test('a probed report passes the peer shape check after a JSON round trip', async () => {
  const peer = JSON.parse(JSON.stringify({ ...(await studio()), host: 'studio-b' })) as HostReport;
  assert.doesNotThrow(() => diagnose({ report: plainHost('a'), peers: [peer], mode: 'rdma' }));
});
