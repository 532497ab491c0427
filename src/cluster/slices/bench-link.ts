import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { TandemError } from '../../errors/index.js';

/**
 * A link of a given rate for `bench slices --link RATE`: a network namespace for the member,
 * joined to this one by a veth pair whose both ends are shaped by a token bucket (`tc qdisc
 * ... tbf`) to RATE, so the transfer crosses a link slower than the CPUs, as a real 1-10 GbE or
 * Thunderbolt cable is, instead of loopback (where the link is a memory copy and the CPUs are
 * the limit). Linux only, as root. Names carry this process's id; `close()` deletes the
 * namespace and with it the veth pair.
 */
export class ShapedLink {
  /** The coordinator's address on the link (this namespace) and the member's (inside `ns`). */
  readonly here: string;
  readonly there: string;

  private constructor(
    readonly ns: string,
    readonly rate: string,
    octet: number,
  ) {
    this.here = `10.213.${octet}.1`;
    this.there = `10.213.${octet}.2`;
  }

  /** Builds the namespace and the shaped veth pair; typed errors name what is missing. */
  static open(rate: string): ShapedLink {
    const bytesPerS = parseRate(rate);
    if (process.platform !== 'linux' || process.getuid?.() !== 0)
      throw new TandemError('CLI_BENCH_LINK', '--link needs Linux and root (it makes a network namespace)', {
        hint: 'run as root on Linux, or leave --link out to measure over 127.0.0.1',
      });
    const link = new ShapedLink(`tdsl${process.pid}`, rate, process.pid % 250);
    const a = `tsl${process.pid}a`;
    const b = `tsl${process.pid}b`;
    // a bucket of 5 ms at the rate (at least 64 KiB): large enough for the kernel timer's tick
    const burst = String(Math.max(64 * 1024, Math.round(bytesPerS / 200)));
    try {
      run('ip', 'netns', 'add', link.ns);
      run('ip', 'link', 'add', a, 'type', 'veth', 'peer', 'name', b, 'netns', link.ns);
      run('ip', 'addr', 'add', `${link.here}/30`, 'dev', a);
      run('ip', 'link', 'set', a, 'up');
      run('ip', '-n', link.ns, 'addr', 'add', `${link.there}/30`, 'dev', b);
      run('ip', '-n', link.ns, 'link', 'set', b, 'up');
      run('ip', '-n', link.ns, 'link', 'set', 'lo', 'up');
      const tbf = ['root', 'tbf', 'rate', rate, 'burst', burst, 'latency', '50ms'];
      run('tc', 'qdisc', 'add', 'dev', a, ...tbf);
      run('ip', 'netns', 'exec', link.ns, 'tc', 'qdisc', 'add', 'dev', b, ...tbf);
    } catch (e) {
      link.close();
      throw new TandemError(
        'CLI_BENCH_LINK',
        `cannot build a ${rate} link: ${(e as Error).message.split('\n')[0]}`,
        {
          hint: 'it needs iproute2 (ip, tc) and the tbf queueing discipline; run bin/setup.sh',
        },
      );
    }
    return link;
  }

  /** `argv` run inside the member's namespace. */
  inside(argv: readonly string[]): string[] {
    return ['ip', 'netns', 'exec', this.ns, ...argv];
  }

  close(): void {
    try {
      run('ip', 'netns', 'del', this.ns);
    } catch {
      // never made, or already gone
    }
  }
}

/** Bytes per second of a tc rate such as `10gbit`, `2.5gbit`, `940mbit`; a typed error otherwise. */
export function parseRate(rate: string): number {
  const m = /^(\d+(?:\.\d+)?)(k|m|g)bit$/.exec(rate);
  const unit = m ? { k: 1e3, m: 1e6, g: 1e9 }[m[2] as 'k' | 'm' | 'g'] : 0;
  const bits = m ? Number(m[1]) * unit : 0;
  if (!(bits >= 1e6 && bits <= 400e9))
    throw new TandemError('CLI_BENCH_LINK', `--link '${rate}' is not a rate between 1mbit and 400gbit`, {
      hint: 'give the rate as tc writes it, for example --link 10gbit or --link 2.5gbit',
    });
  return bits / 8;
}

function run(cmd: string, ...args: string[]): void {
  execFileSync(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'], timeout: 10_000 });
}

/**
 * CPU time (user and system, ms) this process's main thread has used, from
 * /proc/self/task/PID/stat in ticks of 10 ms (USER_HZ 100, the value on every Linux tandem
 * runs on); 0 where there is no /proc. The bench's figure for the serial part of a process's
 * work: process.cpuUsage counts every thread, the thread pool's hashing among them.
 */
export function mainThreadCpuMs(): number {
  try {
    const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
    // fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return 0;
  }
}
