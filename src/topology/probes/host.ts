import { spawn } from 'node:child_process';
import { hostname, networkInterfaces, platform } from 'node:os';
import { readFileSync } from 'node:fs';
import {
  parseHardwarePorts,
  parseIbvDevinfo,
  parseIfconfig,
  parseRdmaCtlStatus,
  parseThunderbolt,
} from './macos.js';
import { readLinuxInterfaces, readLinuxRdma } from './linux.js';
import type { HostReport, NetInterface } from './types.js';
import { onInterrupt } from '../../util/on-interrupt.js';

/** Runs a command and returns its stdout, or throws; injected in tests. */
export type CommandRunner = (file: string, args: readonly string[]) => Promise<string>;

const PROBE_TIMEOUT_MS = 5000;
const PROBE_MAX_OUTPUT = 8 << 20;

/** Process groups of probe commands still running: ended if this process is interrupted. */
const liveGroups = new Set<number>();

function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // The group is already gone.
  }
}

/**
 * A probe runs in its own process group (detached), so it no longer gets the terminal's
 * Ctrl-C: while any runs, an onInterrupt listener ends the groups on SIGINT/SIGTERM, then
 * lets the signal take its default course unless another listener handles it.
 */
function watchSignals(): () => void {
  return onInterrupt(() => {
    for (const pid of liveGroups) killGroup(pid);
    liveGroups.clear();
  });
}
/** Unregisters the listener of the running probes (a no-op when none is registered). */
let unwatchSignals = (): void => {};

/**
 * Runs a probe command with a 5 s deadline, so a wedged tool cannot hang doctor. The command
 * runs in its own process group and the deadline kills the whole group: killing only the
 * direct child left what it started (ssh's remote command, a shell's `sleep`) running.
 */
export const runCommand: CommandRunner = (file, args) => runWithin(PROBE_TIMEOUT_MS, file, args);

/** runCommand with another deadline (tests). */
export const runWithin = (timeoutMs: number, file: string, args: readonly string[]): Promise<string> =>
  new Promise((resolve, reject) => {
    // Watch the signals before the probe exists: it can run, and be seen running, before
    // spawn() returns, and a signal then would end this process and leave the probe behind.
    if (liveGroups.size === 0) unwatchSignals = watchSignals();
    const child = spawn(file, [...args], { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    if (child.pid !== undefined) liveGroups.add(child.pid);
    else if (liveGroups.size === 0) unwatchSignals();
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let size = 0;
    let failure: Error | undefined;
    const stop = (why: Error): void => {
      failure ??= why;
      if (child.pid !== undefined) killGroup(child.pid);
    };
    const collect = (into: Buffer[]) => (d: Buffer) => {
      size += d.length;
      if (size > PROBE_MAX_OUTPUT) stop(new Error(`${file}: output exceeded ${PROBE_MAX_OUTPUT} bytes`));
      else into.push(d);
    };
    child.stdout.on('data', collect(out));
    child.stderr.on('data', collect(err));
    const timer = setTimeout(
      () =>
        stop(
          new Error(
            `${file} ${args.join(' ')}: no answer within ${timeoutMs} ms (killed it and what it started)`,
          ),
        ),
      timeoutMs,
    );
    const done = (): void => {
      clearTimeout(timer);
      if (child.pid !== undefined && liveGroups.delete(child.pid) && liveGroups.size === 0) unwatchSignals();
    };
    child.on('error', (e) => {
      done();
      reject(e);
    });
    // 'close': the exit and every holder of the pipes gone (a grandchild keeps them open).
    child.on('close', (code, signal) => {
      done();
      const stderr = Buffer.concat(err).toString('utf8').trim();
      if (failure) reject(failure);
      else if (code !== 0)
        reject(
          new Error(
            `Command failed: ${file} ${args.join(' ')} (${signal ?? `exit ${code}`})${stderr ? `\n${stderr}` : ''}`,
          ),
        );
      else resolve(Buffer.concat(out).toString('utf8'));
    });
  });

export function tandemVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as {
      version?: string;
    };
    return pkg.version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/** Adds IPv4 and IPv6 link-local addresses from Node's view of the interfaces. */
function addAddresses(interfaces: NetInterface[]): void {
  const addrs = networkInterfaces();
  for (const iface of interfaces) {
    for (const a of addrs[iface.name] ?? []) {
      if (a.family === 'IPv4' && !iface.ipv4.includes(a.address)) iface.ipv4.push(a.address);
      if (a.family === 'IPv6' && a.address.startsWith('fe80') && !iface.ipv6LinkLocal.includes(a.address))
        iface.ipv6LinkLocal.push(a.address);
    }
  }
}

async function attempt<T>(notes: string[], what: string, fn: () => Promise<T>): Promise<T | undefined> {
  try {
    return await fn();
  } catch (e) {
    notes.push(`${what}: ${(e as Error).message.split('\n')[0]}`);
    return undefined;
  }
}

async function probeMac(report: HostReport, run: CommandRunner): Promise<void> {
  const notes = report.notes;
  const hw =
    (await attempt(notes, 'networksetup -listallhardwareports', () =>
      run('networksetup', ['-listallhardwareports']),
    )) ?? '';
  const ports = parseHardwarePorts(hw);
  const tb = await attempt(notes, 'system_profiler SPThunderboltDataType -json', () =>
    run('system_profiler', ['SPThunderboltDataType', '-json']),
  );
  if (tb !== undefined)
    report.thunderbolt =
      (await attempt(notes, 'parse thunderbolt', async () => parseThunderbolt(tb, ports))) ?? [];
  const ifc = await attempt(notes, 'ifconfig', () => run('ifconfig', []));
  report.interfaces = ifc === undefined ? [] : parseIfconfig(ifc);
  const tbIfaces = new Map(report.thunderbolt.filter((p) => p.iface).map((p) => [p.iface as string, p]));
  for (const i of report.interfaces) {
    const port = tbIfaces.get(i.name);
    if (port && i.kind === 'unknown') {
      i.kind = (port.speedGbps ?? 0) >= 80 ? 'tb5' : 'tb4';
      if (port.speedGbps !== undefined) i.speedGbps = port.speedGbps;
    } else if (i.kind === 'unknown')
      i.kind = [...ports.entries()].some(([n, d]) => d === i.name && /wi-?fi/i.test(n)) ? 'wifi' : 'ethernet';
  }
  const status = await attempt(notes, 'rdma_ctl status', () => run('rdma_ctl', ['status']));
  const enabled = status === undefined ? undefined : parseRdmaCtlStatus(status);
  if (enabled !== undefined) report.rdma.enabled = enabled;
  const info = await attempt(notes, 'ibv_devinfo', () => run('ibv_devinfo', []));
  report.rdma.devices = info === undefined ? [] : parseIbvDevinfo(info);
}

/** Probes this host: interfaces, RDMA state and devices, Thunderbolt ports. Never throws for a missing tool. */
export async function probeHost(
  run: CommandRunner = runCommand,
  os: string = platform(),
): Promise<HostReport> {
  const report: HostReport = {
    host: hostname(),
    platform: os,
    tandemVersion: tandemVersion(),
    timeMs: Date.now(),
    interfaces: [],
    rdma: { devices: [] },
    thunderbolt: [],
    notes: [],
  };
  if (os === 'darwin') await probeMac(report, run);
  else if (os === 'linux') {
    report.interfaces = readLinuxInterfaces();
    report.rdma.devices = readLinuxRdma();
  } else report.notes.push(`platform ${os}: only macOS and Linux are probed`);
  addAddresses(report.interfaces);
  return report;
}
