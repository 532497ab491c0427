import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';

/*
 * A test rig of hosts made of network namespaces and cables made of veth pairs. Every name
 * carries the test process id, so parallel runs never collide; `cleanup()` kills every child
 * and deletes every namespace (call it from `finally`). Traffic stays inside these namespaces:
 * discovery uses IPv6 link-local multicast on the veths, and init's addresses are assigned
 * only inside them.
 */

const repo = resolve(import.meta.dirname, '..', '..');
let rigCount = 0;

/** Why the rig cannot run here (not root, no iproute2, no namespaces), or undefined when it can. */
export function rigUnavailable(): string | undefined {
  if (process.platform !== 'linux') return 'network namespaces need Linux';
  if (process.getuid?.() !== 0) return 'network namespace tests need root';
  try {
    execFileSync('ip', ['-V'], { stdio: 'ignore', timeout: 5000 });
  } catch {
    return '`ip` (iproute2) is missing: run bin/setup.sh';
  }
  return undefined;
}

const ip = (...args: string[]): string => execFileSync('ip', args, { encoding: 'utf8', timeout: 10_000 });

/**
 * Deletes namespaces this rig made in runs whose process is gone (killed before its `finally`
 * ran). Only names of the rig's own pattern (`td<pid>r<n>-<host>`) with a dead pid are touched.
 */
export function sweepStaleNamespaces(): string[] {
  const swept: string[] = [];
  for (const line of ip('netns', 'list').split('\n')) {
    const name = line.split(' ')[0] ?? '';
    const m = /^td(\d+)r\d+-/.exec(name);
    if (!m) continue;
    try {
      process.kill(Number(m[1]), 0);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ESRCH') continue;
      try {
        ip('netns', 'del', name);
        swept.push(name);
      } catch {
        // already gone (another run swept it first)
      }
    }
  }
  return swept;
}

export interface Cable {
  a: string;
  aIf: string;
  b: string;
  bIf: string;
}

/** A child process in one namespace whose stdout is JSON lines. */
export class RigProcess {
  readonly lines: Record<string, unknown>[] = [];
  stderr = '';
  exitCode: number | null | undefined;
  readonly exited: Promise<number | null>;
  private waiters: (() => void)[] = [];

  constructor(
    readonly host: string,
    readonly child: ChildProcess,
  ) {
    let buf = '';
    child.stdout?.setEncoding('utf8').on('data', (d: string) => {
      buf += d;
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        try {
          this.lines.push(JSON.parse(line) as Record<string, unknown>);
        } catch {
          this.lines.push({ text: line });
        }
        this.wake();
      }
    });
    child.stderr?.setEncoding('utf8').on('data', (d: string) => (this.stderr += d));
    this.exited = new Promise((resolveExit) =>
      child.on('exit', (code) => {
        this.exitCode = code;
        this.wake();
        resolveExit(code);
      }),
    );
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  /** Waits (at most `ms`) until `test` holds for the latest line; returns that line. */
  async waitFor(
    test: (line: Record<string, unknown>) => boolean,
    ms: number,
    what: string,
  ): Promise<Record<string, unknown>> {
    const deadline = Date.now() + ms;
    for (;;) {
      const last = this.lines[this.lines.length - 1];
      if (last && test(last)) return last;
      const left = deadline - Date.now();
      if (left <= 0 || this.exitCode !== undefined) {
        throw new Error(
          `${this.host}: ${what} not seen within ${ms} ms; last line: ${JSON.stringify(last)}; stderr: ${this.stderr.slice(-500)}`,
        );
      }
      await new Promise<void>((wake) => {
        const t = setTimeout(wake, Math.min(left, 200));
        this.waiters.push(() => {
          clearTimeout(t);
          wake();
        });
      });
    }
  }
}

export class NetnsRig {
  readonly id = `td${process.pid}r${rigCount++}`;
  readonly cables: Cable[] = [];
  private readonly hosts = new Map<string, string>();
  private readonly procs: RigProcess[] = [];

  ns(host: string): string {
    const ns = this.hosts.get(host);
    if (ns === undefined) throw new Error(`rig: no host ${host}`);
    return ns;
  }

  addHost(host: string): void {
    const ns = `${this.id}-${host}`;
    ip('netns', 'add', ns);
    this.hosts.set(host, ns);
    // Link-local addresses usable at once (no duplicate address detection wait) inside the test namespace only.
    execFileSync(
      'ip',
      [
        'netns',
        'exec',
        ns,
        'sysctl',
        '-qw',
        'net.ipv6.conf.all.accept_dad=0',
        'net.ipv6.conf.default.accept_dad=0',
      ],
      { timeout: 10_000 },
    );
    ip('-n', ns, 'link', 'set', 'lo', 'up');
  }

  /** A veth cable; each end is named after the host it leads to (`t-b` on a). */
  cable(a: string, b: string): Cable {
    const count = this.cables.filter((c) => (c.a === a && c.b === b) || (c.a === b && c.b === a)).length;
    const suffix = count === 0 ? '' : `-${count + 1}`;
    const c = { a, aIf: `t-${b}${suffix}`, b, bIf: `t-${a}${suffix}` };
    ip('link', 'add', c.aIf, 'netns', this.ns(a), 'type', 'veth', 'peer', 'name', c.bIf, 'netns', this.ns(b));
    ip('-n', this.ns(a), 'link', 'set', c.aIf, 'up');
    ip('-n', this.ns(b), 'link', 'set', c.bIf, 'up');
    this.cables.push(c);
    return c;
  }

  /** Makes a host a layer-2 switch: a Linux bridge `br0` forwarding between these interfaces. */
  bridge(host: string, ifaces: readonly string[]): void {
    ip('-n', this.ns(host), 'link', 'add', 'br0', 'type', 'bridge');
    for (const i of ifaces) ip('-n', this.ns(host), 'link', 'set', i, 'master', 'br0');
    ip('-n', this.ns(host), 'link', 'set', 'br0', 'up');
  }

  /**
   * Hosts on one switch: a host `sw` bridging a cable to each, and host i given
   * `${prefix}.${i + 1}/24` on its end. Returns the cables, in the hosts' order.
   */
  switched(hosts: readonly string[], prefix: string): Cable[] {
    this.addHost('sw');
    for (const h of hosts) this.addHost(h);
    const cables = hosts.map((h) => this.cable('sw', h));
    this.bridge(
      'sw',
      cables.map((c) => c.aIf),
    );
    hosts.forEach((h, i) => this.addAddress(h, cables[i]!.bIf, `${prefix}.${i + 1}/24`));
    return cables;
  }

  setLink(host: string, iface: string, up: boolean): void {
    ip('-n', this.ns(host), 'link', 'set', iface, up ? 'up' : 'down');
  }

  /** IPv4 addresses (with prefix) inside a host's namespace, by interface. */
  addresses(host: string): Map<string, string[]> {
    const out = new Map<string, string[]>();
    for (const line of ip('-n', this.ns(host), '-4', '-o', 'addr', 'show').split('\n')) {
      const m = /^\d+:\s+(\S+)\s+inet\s+(\S+)/.exec(line);
      if (m) out.set(m[1] as string, [...(out.get(m[1] as string) ?? []), m[2] as string]);
    }
    return out;
  }

  /** Gives a host's interface an address (`10.0.0.1/24`), inside its namespace only. */
  addAddress(host: string, iface: string, cidr: string): void {
    ip('-n', this.ns(host), 'addr', 'add', cidr, 'dev', iface);
  }

  /** Runs `tandem <args>` inside a host's namespace. */
  tandem(host: string, args: readonly string[], env: NodeJS.ProcessEnv = process.env): RigProcess {
    return this.node(host, [join(repo, 'bin', 'tandem.js'), ...args], env);
  }

  /** Runs Node with `args` (a script and its arguments) inside a host's namespace. */
  node(host: string, args: readonly string[], env: NodeJS.ProcessEnv = process.env): RigProcess {
    const child = spawn('ip', ['netns', 'exec', this.ns(host), process.execPath, ...args], {
      cwd: repo,
      stdio: ['ignore', 'pipe', 'pipe'],
      env,
    });
    const proc = new RigProcess(host, child);
    this.procs.push(proc);
    return proc;
  }

  /** Kills every child (TERM, then KILL after 2 s) and deletes every namespace. Never throws. */
  async cleanup(): Promise<void> {
    const alive = this.procs.filter((p) => p.exitCode === undefined);
    for (const p of alive) p.child.kill('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(alive.map((p) => p.exited)),
      new Promise((r) => (timer = setTimeout(r, 2000))),
    ]);
    clearTimeout(timer);
    for (const p of alive) if (p.exitCode === undefined) p.child.kill('SIGKILL');
    for (const ns of this.hosts.values()) {
      try {
        ip('netns', 'del', ns);
      } catch {
        if (existsSync(`/run/netns/${ns}`)) process.stderr.write(`rig: could not delete namespace ${ns}\n`);
      }
    }
    this.hosts.clear();
  }
}
