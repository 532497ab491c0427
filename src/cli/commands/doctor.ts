import { existsSync, readFileSync } from 'node:fs';
import { platform } from 'node:os';
import { defineCommand } from '../options.js';
import { TandemError } from '../../errors/index.js';
import {
  defaultConfigPath,
  diagnose,
  formatFindings,
  hasErrors,
  probeHost,
  readClusterConfig,
  runCommand,
  type Finding,
  type HostReport,
  type TopologyGraph,
} from '../../topology/index.js';
import { checkHostReport } from '../../topology/probes/check-report.js';

function readJson(path: string, what: string): unknown {
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new TandemError(
      'INVALID_ARGUMENT',
      `doctor: cannot read ${what} '${path}': ${(e as Error).message}`,
      {
        hint: 'pass a JSON file written by `tandem doctor --report`',
      },
    );
  }
}

/** A report file of another host, its shape checked so that a bad one is refused by its path. */
function readReport(path: string): HostReport {
  return checkHostReport(readJson(path, 'report'), path);
}

/** Asks a remote host for its report over ssh (what a hostfile's `ssh` names are for). */
async function remoteReport(ssh: string, sshCommand: string): Promise<HostReport | string> {
  const [file, ...args] = sshCommand.split(/\s+/).filter((w) => w !== '');
  try {
    const out = await runCommand(file as string, [...args, ssh, 'tandem', 'doctor', '--report']);
    return JSON.parse(out) as HostReport;
  } catch (e) {
    return `${ssh}: ${(e as Error).message.split('\n')[0]}`;
  }
}

/** One finding per verbs device from a transfer through the rdma provider, each with its verdict. */
async function rdmaPortFindings(host: string): Promise<Finding[]> {
  const { checkRdmaPorts } = await import('../../fabric/rdma-port-check.js');
  return (await checkRdmaPorts()).map((c) => ({
    check: 'rdma-port',
    host,
    severity: c.ok ? 'ok' : 'error',
    title:
      c.verdict === 'ok'
        ? `${c.device} carries verbs traffic`
        : c.verdict === 'timeout'
          ? `${c.device} gave no verdict through the rdma provider in time`
          : `${c.device} failed a transfer through the rdma provider`,
    evidence: c.detail,
    fix:
      c.verdict === 'ok'
        ? ''
        : c.verdict === 'timeout'
          ? 'the device or its completions stall: check `tandem devinfo` (port active, GIDs) and the kernel log; on macOS try TANDEM_RDMA_QP=uc'
          : 'check the port state and GIDs with `tandem devinfo`; on macOS try TANDEM_RDMA_QP=uc',
  }));
}

export const command = defineCommand({
  name: 'doctor',
  summary:
    'check this host (and with a hostfile every host) for what breaks a cluster, and say how to fix it',
  description:
    'Checks RDMA (rdma_ctl, verbs devices, port state; with --mode rdma a write and a send through the rdma provider on each device), Thunderbolt Bridge loops, Thunderbolt 4 links, IPv4 on RDMA interfaces, MTU, clock and version skew, and missing cables for the chosen topology. Exits 1 when any finding is an error.',
  options: {
    mode: {
      type: 'string',
      description: 'what the cluster will run over (auto: rdma on macOS, tcp elsewhere)',
      choices: ['auto', 'rdma', 'tcp'],
      default: 'auto',
    },
    topology: {
      type: 'string',
      description: 'the topology the cables must allow',
      choices: ['auto', 'ring', 'mesh'],
      default: 'auto',
    },
    hostfile: {
      type: 'string',
      description:
        "hostfile (MLX JSON, or a host:port list as for `run --hosts`): check every host in it over ssh, and the JSON one's cables",
      placeholder: 'file',
    },
    config: {
      type: 'string',
      description:
        'cluster config from `tandem init` whose cables to check (default: $TANDEM_CONFIG or ~/.config/tandem/cluster.json, if present)',
      placeholder: 'file',
    },
    reports: {
      type: 'list',
      description: 'reports of other hosts saved with `tandem doctor --report`',
      placeholder: 'files',
    },
    ssh: {
      type: 'string',
      description: 'ssh command used with --hostfile',
      default: 'ssh -o BatchMode=yes -o ConnectTimeout=5',
    },
    report: {
      type: 'boolean',
      description: "print only this host's raw probe report as JSON (for another host's doctor)",
    },
    json: { type: 'boolean', description: 'print the findings as JSON' },
  },
  examples: ['tandem doctor', 'tandem doctor --mode=rdma --hostfile m3-ultra-jaccl.json --json'],
  async run({ options }) {
    const report = await probeHost();
    if (options.report) {
      process.stdout.write(JSON.stringify(report) + '\n');
      return 0;
    }
    const peers: HostReport[] = (options.reports ?? []).map(readReport);
    let graph: TopologyGraph | undefined;
    const configPath = options.config ?? defaultConfigPath();
    if (options.config !== undefined || existsSync(configPath)) graph = readClusterConfig(configPath).graph;
    const unreachable: string[] = [];
    if (options.hostfile !== undefined) {
      // Loaded only here: the hostfile reader pulls in the cluster layer (~240 modules), which
      // doctor without --hostfile does not need (it starts in seconds, not a minute, in an emulated guest).
      const { loadHostfile } = await import('../../cluster/hostfile.js');
      const hostfile = loadHostfile(options.hostfile, '--hostfile');
      // A host:port list names no cables: its hosts are checked, the cabling is not.
      if (hostfile.format === 'mlx') graph = hostfile.graph;
      const others = [...new Set([...hostfile.addresses.values()].map((a) => a.ssh ?? ''))]
        .filter((h) => h !== '')
        .filter((h) => h !== report.host && !peers.some((p) => p.host === h));
      for (const r of await Promise.all(others.map((h) => remoteReport(h, options.ssh)))) {
        if (typeof r === 'string') unreachable.push(r);
        else peers.push(r);
      }
    }
    const mode = options.mode === 'auto' ? (platform() === 'darwin' ? 'rdma' : 'tcp') : options.mode;
    const findings = diagnose({
      report,
      peers,
      mode,
      topology: options.topology,
      ...(graph ? { graph } : {}),
    });
    if (mode === 'rdma') findings.push(...(await rdmaPortFindings(report.host)));
    for (const u of unreachable) {
      findings.push({
        check: 'reach',
        host: u.split(':')[0] ?? u,
        severity: 'error',
        title: 'host could not be checked',
        evidence: u,
        fix: 'make password-less ssh work to it and install tandem there',
      });
    }
    if (options.json) {
      const count = (s: string): number => findings.filter((f) => f.severity === s).length;
      process.stdout.write(
        JSON.stringify({
          host: report.host,
          mode,
          errors: count('error'),
          warnings: count('warning'),
          findings,
        }) + '\n',
      );
    } else process.stdout.write(formatFindings(findings));
    return hasErrors(findings) ? 1 : 0;
  },
});
