import { classify, findRing } from './classify.js';
import { findBridgeLoops } from './loops.js';
import type { TopologyGraph } from './model.js';
import { checkHostReport } from './probes/check-report.js';
import type { HostReport, NetInterface } from './probes/types.js';

export type Severity = 'error' | 'warning' | 'info' | 'ok';

/** One thing doctor checked: how bad, what it saw, and what to do. */
export interface Finding {
  check: string;
  severity: Severity;
  host: string;
  title: string;
  evidence: string;
  fix: string;
}

export interface DoctorInput {
  /** This host's report. */
  report: HostReport;
  /** The other hosts' reports (from a hostfile), if any. */
  peers?: readonly HostReport[];
  mode: 'rdma' | 'tcp';
  topology?: 'ring' | 'mesh' | 'auto';
  /** The cluster's cables, if known (discovery or a hostfile). */
  graph?: TopologyGraph;
  /** Clock skew above this is a warning (heartbeats and deadlines compare clocks). */
  maxSkewMs?: number;
}

const thunderbolt = (i: NetInterface): boolean => i.kind === 'tb5' || i.kind === 'tb4';
const linkUp = (i: NetInterface): boolean => i.up && i.carrier !== false;

function checkRdma(r: HostReport, mode: DoctorInput['mode']): Finding[] {
  const at = { check: 'rdma', host: r.host };
  const devs = r.rdma.devices.map((d) => d.name).join(', ') || 'none';
  if (mode === 'tcp')
    return [
      {
        ...at,
        severity: 'info',
        title: 'RDMA not needed in tcp mode',
        evidence: `verbs devices: ${devs}`,
        fix: '',
      },
    ];
  if (r.rdma.enabled === false) {
    return [
      {
        ...at,
        severity: 'error',
        title: 'RDMA over Thunderbolt is disabled',
        evidence: '`rdma_ctl status` reports disabled',
        fix: 'boot into macOS Recovery, open Terminal, run `rdma_ctl enable`, then reboot',
      },
    ];
  }
  if (r.rdma.devices.length === 0) {
    const fix =
      r.platform === 'darwin'
        ? 'RDMA needs macOS 26.2 and Thunderbolt 5: in Recovery run `rdma_ctl enable` and reboot'
        : 'load a verbs driver (or `rdma link add rxe0 type rxe netdev <iface>` for soft RoCE), or use --mode=tcp';
    return [
      {
        ...at,
        severity: 'error',
        title: 'no RDMA devices',
        evidence: 'no verbs devices found (`ibv_devices` / /sys/class/infiniband)',
        fix,
      },
    ];
  }
  const out: Finding[] = [
    { ...at, severity: 'ok', title: 'RDMA devices present', evidence: `devices: ${devs}`, fix: '' },
  ];
  const cabled = new Set(r.interfaces.filter((i) => thunderbolt(i) && i.carrier === true).map((i) => i.name));
  for (const d of r.rdma.devices) {
    const inactive = d.ports.filter((p) => !p.active);
    if (inactive.length === 0 || (d.netdev !== undefined && !cabled.has(d.netdev) && r.platform === 'darwin'))
      continue;
    out.push({
      ...at,
      check: 'rdma-port',
      severity: 'warning',
      title: `${d.name} is not active`,
      evidence: inactive.map((p) => `port ${p.port}: ${p.state}`).join(', '),
      fix: 'a port becomes active only when the Mac at the other end of the cable also has RDMA enabled; check the cable and the peer',
    });
  }
  for (const d of r.rdma.devices) {
    if (d.netdev === undefined || !d.ports.some((p) => p.active)) continue;
    const iface = r.interfaces.find((i) => i.name === d.netdev);
    if (iface && iface.ipv4.length === 0) {
      out.push({
        ...at,
        check: 'rdma-ipv4',
        severity: 'warning',
        title: `RDMA interface ${d.netdev} has no IPv4 address`,
        evidence: `${d.name} is active but ${d.netdev} has no inet address (queue pairs use IPv4-mapped GIDs)`,
        fix: 'run `tandem init --mode=rdma --apply` to give each cable a /30, or assign one by hand',
      });
    }
  }
  return out;
}

function checkBridge(r: HostReport): Finding[] {
  const at = { check: 'thunderbolt-bridge', host: r.host };
  const bridges = r.interfaces.filter((i) => i.kind === 'bridge' && i.up);
  const tbUp = new Set(
    r.interfaces.filter((i) => thunderbolt(i) && linkUp(i) && i.carrier === true).map((i) => i.name),
  );
  for (const b of bridges) {
    const members = (b.members ?? []).filter((m) => tbUp.has(m));
    if (members.length >= 2) {
      return [
        {
          ...at,
          severity: 'error',
          title: `${b.name} (Thunderbolt Bridge) is up while ${members.length} Thunderbolt links are up`,
          evidence: `${b.name} members with a cable: ${members.join(', ')}; with three or more Macs cabled this forms a loop and a broadcast storm`,
          fix: `disable it: \`sudo ifconfig ${b.name} down\` (or remove Thunderbolt Bridge in System Settings > Network)`,
        },
      ];
    }
  }
  return [
    {
      ...at,
      severity: 'ok',
      title: 'no Thunderbolt Bridge loop risk on this host',
      evidence: `${bridges.length} bridge(s) up`,
      fix: '',
    },
  ];
}

function checkTb4(r: HostReport, mode: DoctorInput['mode']): Finding[] {
  const slow = r.thunderbolt.filter((p) => p.peer && (p.speedGbps ?? 80) < 80);
  return slow.map(
    (p) =>
      ({
        check: 'thunderbolt-speed',
        host: r.host,
        severity: mode === 'rdma' ? 'error' : 'warning',
        title: `Thunderbolt ${p.receptacle}${p.iface ? ` (${p.iface})` : ''} runs at ${p.speedGbps} Gb/s (Thunderbolt 4)`,
        evidence: `cable to ${p.peer?.name ?? 'unknown'} negotiated ${p.speedGbps} Gb/s; RDMA needs Thunderbolt 5 (80 Gb/s) at both ends`,
        fix: 'use a Thunderbolt 5 cable between two Thunderbolt 5 ports, or leave this cable out of the cluster',
      }) as Finding,
  );
}

function checkPeers(input: DoctorInput): Finding[] {
  const r = input.report;
  const peers = input.peers ?? [];
  if (peers.length === 0) return [];
  const out: Finding[] = [];
  const versions = new Map<string, string[]>();
  for (const p of [r, ...peers])
    versions.set(p.tandemVersion, [...(versions.get(p.tandemVersion) ?? []), p.host]);
  if (versions.size > 1) {
    out.push({
      check: 'version',
      host: r.host,
      severity: 'error',
      title: 'tandem versions differ between hosts',
      evidence: [...versions.entries()].map(([v, hosts]) => `${v}: ${hosts.join(', ')}`).join('; '),
      fix: 'install the same tandem version on every host',
    });
  }
  const maxSkew = input.maxSkewMs ?? 1000;
  for (const p of peers) {
    const skew = Math.abs(p.timeMs - r.timeMs);
    if (skew > maxSkew) {
      out.push({
        check: 'clock',
        host: p.host,
        severity: 'warning',
        title: `clock of ${p.host} is ${(skew / 1000).toFixed(1)} s off`,
        evidence: `${p.host} reported ${new Date(p.timeMs).toISOString()}, ${r.host} ${new Date(r.timeMs).toISOString()}`,
        fix: 'enable time sync (System Settings > General > Date & Time, or chrony/systemd-timesyncd)',
      });
    }
  }
  if (out.length === 0)
    out.push({
      check: 'peers',
      host: r.host,
      severity: 'ok',
      title: `${peers.length + 1} hosts agree on version and clock`,
      evidence: '',
      fix: '',
    });
  return out;
}

function checkMtu(input: DoctorInput): Finding[] {
  const reports = new Map([input.report, ...(input.peers ?? [])].map((p) => [p.host, p]));
  const mtu = (host: string, port: string): number | undefined =>
    reports.get(host)?.interfaces.find((i) => i.name === port)?.mtu;
  const out: Finding[] = [];
  for (const l of input.graph?.links ?? []) {
    const a = mtu(l.a, l.aPort);
    const b = mtu(l.b, l.bPort);
    if (a !== undefined && b !== undefined && a !== b) {
      out.push({
        check: 'mtu',
        host: l.a,
        severity: 'error',
        title: `MTU differs across the cable ${l.a}:${l.aPort} - ${l.b}:${l.bPort}`,
        evidence: `${l.a}:${l.aPort} mtu ${a}, ${l.b}:${l.bPort} mtu ${b}`,
        fix: `set the same MTU on both ends, e.g. \`sudo ifconfig ${l.bPort} mtu ${a}\` on ${l.b}`,
      });
    }
  }
  return out;
}

function checkTopology(input: DoctorInput): Finding[] {
  const g = input.graph;
  if (!g || g.hosts.length < 2) return [];
  const c = classify(g);
  const at = { check: 'topology', host: input.report.host };
  const want = input.topology ?? 'auto';
  const pairs = c.missingPairs.map(([x, y]) => `${x}-${y}`).join(', ');
  if (c.kind === 'disconnected') {
    return [
      {
        ...at,
        severity: 'error',
        title: 'some hosts are not connected at all',
        evidence: `uncabled pairs: ${pairs}`,
        fix: 'cable the separate groups together (`tandem topology plan` says how)',
      },
    ];
  }
  if (want === 'mesh' && c.kind !== 'full-mesh') {
    return [
      {
        ...at,
        severity: 'error',
        title: `a full mesh needs ${c.missingPairs.length} more cable(s)`,
        evidence: `uncabled pairs: ${pairs}`,
        fix: 'connect those pairs, or use --topology=ring or auto (relayed collectives)',
      },
    ];
  }
  if (want === 'ring' && c.kind !== 'full-mesh' && !findRing(g)) {
    return [
      {
        ...at,
        severity: 'error',
        title: 'the cables do not form a ring through every host',
        evidence: `shape: ${c.kind}; uncabled pairs: ${pairs}`,
        fix: 'add cables so that every host has two neighbours in one loop (`tandem topology plan`)',
      },
    ];
  }
  return [
    {
      ...at,
      severity: 'ok',
      title: `cables form a ${c.kind}`,
      evidence: `${g.hosts.length} hosts, ${g.links.length} links`,
      fix: '',
    },
  ];
}

function checkClusterLoops(input: DoctorInput): Finding[] {
  const g = input.graph;
  const reports = [input.report, ...(input.peers ?? [])];
  if (!g || reports.length < 2) return [];
  const bridges = new Map(
    reports.map((r) => [
      r.host,
      new Set(r.interfaces.filter((i) => i.kind === 'bridge' && i.up).flatMap((i) => i.members ?? [])),
    ]),
  );
  return findBridgeLoops(g, bridges).map(
    (loop) =>
      ({
        check: 'bridge-loop',
        host: input.report.host,
        severity: 'error',
        title: `bridged cables form a loop: ${loop.hosts.join(' -> ')}`,
        evidence: loop.links.map((l) => `${l.a}:${l.aPort}-${l.b}:${l.bPort}`).join(', '),
        fix: 'disable the Thunderbolt Bridge on these hosts: `sudo ifconfig bridge0 down`',
      }) as Finding,
  );
}

/** Tools or files a probe could not read: shown so that a missing check is never silent. */
function probeNotes(r: HostReport): Finding[] {
  return r.notes.map(
    (note) =>
      ({
        check: 'probe',
        host: r.host,
        severity: 'info',
        title: 'a probe could not run',
        evidence: note,
        fix: 'checks that depend on it were skipped; install the tool or run doctor with the rights it needs',
      }) as Finding,
  );
}

/** Every check on one host (and its peers, when given). Pure: it reads only the reports. */
export function diagnose(input: DoctorInput): Finding[] {
  const r = input.report;
  // Peers' reports come from files or other hosts: check their shape before any check reads them.
  input.peers?.forEach((p, i) => {
    const host = (p as { host?: unknown } | null)?.host;
    checkHostReport(p, `peer report ${i + 1}${typeof host === 'string' ? ` (host '${host}')` : ''}`);
  });
  return [
    ...probeNotes(r),
    ...checkRdma(r, input.mode),
    ...checkBridge(r),
    ...checkTb4(r, input.mode),
    ...(input.peers ?? []).flatMap((p) => [
      ...checkRdma(p, input.mode),
      ...checkBridge(p),
      ...checkTb4(p, input.mode),
    ]),
    ...checkPeers(input),
    ...checkMtu(input),
    ...checkClusterLoops(input),
    ...checkTopology(input),
  ];
}

export const hasErrors = (findings: readonly Finding[]): boolean =>
  findings.some((f) => f.severity === 'error');

const mark: Record<Severity, string> = { error: 'ERROR', warning: 'warn ', info: 'info ', ok: 'ok   ' };

export function formatFindings(findings: readonly Finding[]): string {
  const lines: string[] = [];
  for (const f of findings) {
    lines.push(`${mark[f.severity]}  [${f.host}] ${f.title}`);
    if (f.evidence) lines.push(`       seen: ${f.evidence}`);
    if (f.fix) lines.push(`       fix:  ${f.fix}`);
  }
  const errors = findings.filter((f) => f.severity === 'error').length;
  const warnings = findings.filter((f) => f.severity === 'warning').length;
  lines.push('', `${errors} error(s), ${warnings} warning(s)`);
  return lines.join('\n') + '\n';
}
