import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { TandemError } from '../../errors/index.js';
import { resolveModelPath } from '../model-path.js';
import { mac } from '../protocol.js';
import { mainThreadCpuMs, ShapedLink } from './bench-link.js';
import { SliceServer } from './slice-server.js';

/** One round's rates in MB/s (1e6 bytes), coordinator to member over 127.0.0.1 or a shaped link. */
export interface BenchSlicesRow {
  round: number | 'best';
  /** 'loopback', or the shaped link's rate (`--link`). */
  link: string;
  /** A plain Node TCP stream of the model's size: the link as a Node process sees it. */
  tcp_MBps: number;
  /** iperf3 over the same link, when installed. */
  iperf3_MBps: number | undefined;
  /** The whole model as slices, every piece hashed and checked. */
  slices_MBps: number;
  /** The same, each slice also written to a fresh cache (what a member does). */
  slices_cache_MBps: number;
  /** slices_MBps over the link's raw rate (iperf3 when present, else tcp). */
  ratio: number;
  /**
   * CPU time per GB of the slices transfer (user and system, every thread): the member process
   * and the coordinator's. On a shared machine these move less than the rates do; over
   * 127.0.0.1 the kernel's work for the link is counted in them, over a shaped link partly.
   */
  slices_member_cpu_ms_per_GB: number;
  slices_coordinator_cpu_ms_per_GB: number;
  /**
   * The CPU time of each process's main thread per GB of the slices transfer: the serial part
   * of its work (what runs on the pool's threads is not in it). 1000 over the larger of the two
   * is about the rate in MB/s the two main threads allow when cores are to spare. Linux only
   * (from /proc; 10 ms ticks), else 0.
   */
  slices_member_loop_ms_per_GB: number;
  slices_coordinator_loop_ms_per_GB: number;
}

export interface BenchSlicesOptions {
  model: string;
  rounds: number;
  /** A tc rate (`10gbit`): the member runs in a namespace behind a veth pair shaped to it. */
  link?: string | undefined;
  onRow?: (r: BenchSlicesRow) => void;
}

/** A TCP server that sends 4 MiB buffers to whoever connects until they close. */
async function tcpSource(host: string): Promise<{ server: Server; port: number }> {
  const block = randomBytes(4 * 1024 * 1024);
  const server = createServer((socket) => {
    socket.on('error', () => socket.destroy());
    const pump = (): void => {
      while (!socket.destroyed && socket.write(block));
    };
    socket.on('drain', pump);
    pump();
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return { server, port: (server.address() as { port: number }).port };
}

/**
 * iperf3's receive rate for 2 s (MB/s) from this namespace to `to`, its server started by
 * `wrap` (inside the link's namespace), or undefined without iperf3.
 */
function iperf3(to: string, wrap: (argv: string[]) => string[]): number | undefined {
  const port = 20000 + Math.floor(Math.random() * 20000);
  const [cmd, ...args] = wrap(['iperf3', '-s', '-1', '-p', String(port)]);
  const server = spawn(cmd!, args, { stdio: 'ignore' });
  server.on('error', () => undefined);
  try {
    spawnSync('sleep', ['0.3']);
    const r = spawnSync('iperf3', ['-c', to, '-p', String(port), '-t', '2', '-J'], {
      encoding: 'utf8',
      timeout: 20_000,
    });
    if (r.status !== 0) return undefined;
    const bps = (JSON.parse(r.stdout) as { end?: { sum_received?: { bits_per_second?: number } } }).end
      ?.sum_received?.bits_per_second;
    return bps === undefined ? undefined : bps / 8 / 1e6;
  } catch {
    return undefined;
  } finally {
    server.kill();
  }
}

/** The member's answer to one command: bytes received, in `ms`, using `cpuMs` of its CPU time and `loopMs` of its main thread's. */
interface Answer {
  bytes: number;
  ms: number;
  cpuMs: number;
  loopMs: number;
}

/** Sends one command line to the member process and waits (bounded) for its JSON answer. */
function asker(child: ChildProcess): (line: string) => Promise<Answer> {
  const waiting: ((l: string) => void)[] = [];
  createInterface({ input: child.stdout! }).on('line', (l) => waiting.shift()?.(l));
  return (line) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new TandemError('CLUSTER_TIMEOUT', `bench slices: '${line}' took over 600 s`, {
              hint: 'use a smaller model',
            }),
          ),
        600_000,
      );
      waiting.push((l) => {
        clearTimeout(timer);
        const m = JSON.parse(l) as Answer & { error?: string };
        if (m.error)
          reject(
            new TandemError('CLUSTER_PROTOCOL', `bench slices: ${m.error}`, { hint: 'see the message' }),
          );
        else resolve(m);
      });
      child.stdin!.write(line + '\n');
    });
}

/**
 * `tandem bench slices MODEL`: the model sent as slices from this process (the coordinator) to
 * a member process over 127.0.0.1 (or a link shaped to `link`), beside the link's raw rate measured in the same run (a
 * plain TCP stream, and iperf3 when installed); rounds alternate the three, the best of each counts.
 */
export async function benchSlices(o: BenchSlicesOptions): Promise<BenchSlicesRow[]> {
  const model = resolveModelPath(o.model);
  const link = o.link === undefined ? undefined : ShapedLink.open(o.link);
  try {
    return await benchOver(model, link, o);
  } finally {
    link?.close();
  }
}

async function benchOver(
  model: string,
  link: ShapedLink | undefined,
  o: BenchSlicesOptions,
): Promise<BenchSlicesRow[]> {
  const here = link?.here ?? '127.0.0.1';
  const there = link?.there ?? '127.0.0.1';
  const wrap = (argv: string[]): string[] => (link ? link.inside(argv) : argv);
  const secret = randomBytes(16).toString('hex');
  const server = await SliceServer.start({ model, mac: (role, n) => mac(secret, role, n) });
  const source = await tcpSource(here);
  const [cmd, ...args] = wrap([
    process.execPath,
    '--import',
    import.meta.resolve('tsx'),
    join(import.meta.dirname, 'bench-member.ts'),
    server.addressFor(here).address,
    String(server.source.size),
  ]);
  const child = spawn(cmd!, args, {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, TANDEM_BENCH_SECRET: secret },
  });
  const ask = asker(child);
  const rows: BenchSlicesRow[] = [];
  try {
    // warm-up: the coordinator hashes the model (or reads its cached manifest), pages come in
    const warm = await ask('slices');
    const rate = (r: { bytes: number; ms: number }): number => r.bytes / 1e6 / (r.ms / 1000);
    for (let round = 1; round <= o.rounds; round++) {
      const tcp = rate(await ask(`tcp ${here}:${source.port} ${warm.bytes}`));
      const cpu = process.cpuUsage();
      const loop = mainThreadCpuMs();
      const sliced = await ask('slices');
      const used = process.cpuUsage(cpu);
      const busy = mainThreadCpuMs() - loop;
      const slices = rate(sliced);
      const perGB = (ms: number): number => ms / (sliced.bytes / 1e9);
      const cached = rate(await ask('slices-cache'));
      const raw = iperf3(there, wrap);
      const row = {
        round,
        link: o.link ?? 'loopback',
        tcp_MBps: tcp,
        iperf3_MBps: raw,
        slices_MBps: slices,
        slices_cache_MBps: cached,
        ratio: slices / (raw ?? tcp),
        slices_member_cpu_ms_per_GB: perGB(sliced.cpuMs),
        slices_coordinator_cpu_ms_per_GB: perGB((used.user + used.system) / 1000),
        slices_member_loop_ms_per_GB: perGB(sliced.loopMs),
        slices_coordinator_loop_ms_per_GB: perGB(busy),
      };
      rows.push(row);
      o.onRow?.(row);
    }
    const best = (k: 'tcp_MBps' | 'slices_MBps' | 'slices_cache_MBps'): number =>
      Math.max(...rows.map((r) => r[k]));
    const iperfs = rows.flatMap((r) => (r.iperf3_MBps === undefined ? [] : [r.iperf3_MBps]));
    const bestRow: BenchSlicesRow = {
      round: 'best',
      link: o.link ?? 'loopback',
      tcp_MBps: best('tcp_MBps'),
      iperf3_MBps: iperfs.length ? Math.max(...iperfs) : undefined,
      slices_MBps: best('slices_MBps'),
      slices_cache_MBps: best('slices_cache_MBps'),
      ratio: best('slices_MBps') / (iperfs.length ? Math.max(...iperfs) : best('tcp_MBps')),
      slices_member_cpu_ms_per_GB: Math.min(...rows.map((r) => r.slices_member_cpu_ms_per_GB)),
      slices_coordinator_cpu_ms_per_GB: Math.min(...rows.map((r) => r.slices_coordinator_cpu_ms_per_GB)),
      slices_member_loop_ms_per_GB: Math.min(...rows.map((r) => r.slices_member_loop_ms_per_GB)),
      slices_coordinator_loop_ms_per_GB: Math.min(...rows.map((r) => r.slices_coordinator_loop_ms_per_GB)),
    };
    rows.push(bestRow);
    o.onRow?.(bestRow);
    return rows;
  } finally {
    child.stdin?.end();
    child.kill();
    source.server.close();
    server.close();
  }
}
