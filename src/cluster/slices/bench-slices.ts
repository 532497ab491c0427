import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { TandemError } from '../../errors/index.js';
import { resolveModelPath } from '../model-path.js';
import { mac } from '../protocol.js';
import { SliceServer } from './slice-server.js';

/** One round's rates in MB/s (1e6 bytes), coordinator to member over 127.0.0.1. */
export interface BenchSlicesRow {
  round: number | 'best';
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
}

export interface BenchSlicesOptions {
  model: string;
  rounds: number;
  onRow?: (r: BenchSlicesRow) => void;
}

/** A TCP server that sends 4 MiB buffers to whoever connects until they close. */
async function tcpSource(): Promise<{ server: Server; port: number }> {
  const block = randomBytes(4 * 1024 * 1024);
  const server = createServer((socket) => {
    socket.on('error', () => socket.destroy());
    const pump = (): void => {
      while (!socket.destroyed && socket.write(block));
    };
    socket.on('drain', pump);
    pump();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as { port: number }).port };
}

/** iperf3's receive rate over 127.0.0.1 for 2 s (MB/s), or undefined without iperf3. */
function iperf3(): number | undefined {
  const port = 20000 + Math.floor(Math.random() * 20000);
  const server = spawn('iperf3', ['-s', '-1', '-p', String(port)], { stdio: 'ignore' });
  server.on('error', () => undefined);
  try {
    spawnSync('sleep', ['0.3']);
    const r = spawnSync('iperf3', ['-c', '127.0.0.1', '-p', String(port), '-t', '2', '-J'], {
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

/** Sends one command line to the member process and waits (bounded) for its JSON answer. */
function asker(child: ChildProcess): (line: string) => Promise<{ bytes: number; ms: number }> {
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
        const m = JSON.parse(l) as { bytes: number; ms: number; error?: string };
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
 * a member process over 127.0.0.1, beside the link's raw rate measured in the same run (a
 * plain TCP stream, and iperf3 when installed); rounds alternate the three, the best of each counts.
 */
export async function benchSlices(o: BenchSlicesOptions): Promise<BenchSlicesRow[]> {
  const model = resolveModelPath(o.model);
  const secret = randomBytes(16).toString('hex');
  const server = await SliceServer.start({ model, mac: (role, n) => mac(secret, role, n) });
  const source = await tcpSource();
  const child = spawn(
    process.execPath,
    [
      '--import',
      import.meta.resolve('tsx'),
      join(import.meta.dirname, 'bench-member.ts'),
      server.addressFor('127.0.0.1').address,
      String(server.source.size),
    ],
    { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, TANDEM_BENCH_SECRET: secret } },
  );
  const ask = asker(child);
  const rows: BenchSlicesRow[] = [];
  try {
    // warm-up: the coordinator hashes the model (or reads its cached manifest), pages come in
    const warm = await ask('slices');
    const rate = (r: { bytes: number; ms: number }): number => r.bytes / 1e6 / (r.ms / 1000);
    for (let round = 1; round <= o.rounds; round++) {
      const tcp = rate(await ask(`tcp 127.0.0.1:${source.port} ${warm.bytes}`));
      const slices = rate(await ask('slices'));
      const cached = rate(await ask('slices-cache'));
      const raw = iperf3();
      const row = {
        round,
        tcp_MBps: tcp,
        iperf3_MBps: raw,
        slices_MBps: slices,
        slices_cache_MBps: cached,
        ratio: slices / (raw ?? tcp),
      };
      rows.push(row);
      o.onRow?.(row);
    }
    const best = (k: 'tcp_MBps' | 'slices_MBps' | 'slices_cache_MBps'): number =>
      Math.max(...rows.map((r) => r[k]));
    const iperfs = rows.flatMap((r) => (r.iperf3_MBps === undefined ? [] : [r.iperf3_MBps]));
    const bestRow: BenchSlicesRow = {
      round: 'best',
      tcp_MBps: best('tcp_MBps'),
      iperf3_MBps: iperfs.length ? Math.max(...iperfs) : undefined,
      slices_MBps: best('slices_MBps'),
      slices_cache_MBps: best('slices_cache_MBps'),
      ratio: best('slices_MBps') / (iperfs.length ? Math.max(...iperfs) : best('tcp_MBps')),
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
