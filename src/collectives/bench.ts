/**
 * Collectives benchmark in real processes, nccl-tests style: for each size, the time of one
 * call (the slowest rank's average), algbw = bytes / time and busbw = algbw x the op's bus
 * factor (all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast 1).
 * Sizes follow nccl-tests: all-reduce / reduce-scatter / broadcast: bytes per rank;
 * all-gather: bytes of the gathered output; all-to-all: bytes each rank sends.
 * Every rank is a child process (bench-rank.ts); this process only collects. Lives in
 * src/ so that the CLI may import it (bench/collectives.ts re-exports it).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { TandemError } from '../errors/index.js';
import { tiedToParent } from '../util/exit-with-parent.js';
import type { Algorithm } from './call.js';
import type { ProviderName } from '../fabric/index.js';
import { anchorLines, goalCheck, type GoalCheck } from '../fabric/bench.js';
import type { BenchOp, RankConfig } from './bench-rank.js';

export { anchorsScript, parseSize } from '../fabric/bench.js';

export const DEFAULT_SIZES: number[] = Array.from({ length: 24 }, (_, i) => 8 * 2 ** i); // 8 B .. 64 MiB

export interface CollRow {
  op: BenchOp;
  ranks: number;
  provider: ProviderName;
  algorithm: string;
  bytes: number;
  time_us: number;
  algbw_GBps: number;
  busbw_GBps: number;
  /** Median time of one call (the slowest rank's), beside the mean that nccl-tests and Open MPI report. */
  p50_us?: number;
}

export interface AnchorRow {
  anchor: string;
  btl: string;
  ranks: number;
  bytes: number;
  time_us: number;
  busbw_GBps: number;
}

export function busFactor(op: BenchOp, n: number): number {
  if (n <= 1) return 0;
  if (op === 'all-reduce') return (2 * (n - 1)) / n;
  if (op === 'broadcast') return 1;
  // each rank sends its whole part to each of the n - 1 others
  if (op === 'tp-exchange') return n - 1;
  return (n - 1) / n;
}

/** `timeUs` is the mean time per call (the statistic of nccl-tests and of the Open MPI anchor); algbw and busbw derive from it. */
export function toRow(
  op: BenchOp,
  ranks: number,
  provider: ProviderName,
  algorithm: string,
  bytes: number,
  timeUs: number,
  p50Us?: number,
): CollRow {
  const algbw = bytes / timeUs / 1e3;
  const round = (x: number): number => Math.round(x * 1000) / 1000;
  const row: CollRow = {
    op,
    ranks,
    provider,
    algorithm,
    bytes,
    time_us: round(timeUs),
    algbw_GBps: round(algbw),
    busbw_GBps: round(algbw * busFactor(op, ranks)),
  };
  if (p50Us !== undefined) row.p50_us = round(p50Us);
  return row;
}

const rankScript = join(import.meta.dirname, 'bench-rank.ts');
/** Resolved here, so the ranks find tsx whatever the working directory. */
const tsxLoader = import.meta.resolve('tsx');
/** TANDEM_BENCH_NODE_ARGS: extra node flags for every rank process (e.g. `--single-threaded`, `--cpu-prof`), for diagnosis. */
const rankNodeArgs = (process.env.TANDEM_BENCH_NODE_ARGS ?? '').split(' ').filter((a) => a !== '');

function lines(child: ChildProcess, onLine: (l: string) => void): void {
  let buf = '';
  child.stdout?.on('data', (d: Buffer) => {
    buf += d.toString();
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      onLine(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
    }
  });
}

export interface CollBenchOptions {
  op: BenchOp;
  ranks: number;
  provider: ProviderName;
  algorithm?: Algorithm;
  sizes: number[];
  iterations?: number;
  /** Arithmetic before each call, ms (RankConfig.computeMs): rows time the calls after it. */
  computeMs?: number;
  /** tp-exchange: RankConfig.spin. */
  spin?: boolean | number;
}

/** Spawns the ranks, prints each row through `onRow` as it arrives, returns all rows. */
export async function runCollectivesBench(
  o: CollBenchOptions,
  onRow: (r: CollRow) => void,
): Promise<CollRow[]> {
  const base: Omit<RankConfig, 'rank' | 'address'> = {
    size: o.ranks,
    provider: o.provider,
    op: o.op,
    sizes: o.sizes,
    ...(o.algorithm ? { algorithm: o.algorithm } : {}),
    ...(o.iterations ? { iterations: o.iterations } : {}),
    ...(o.computeMs !== undefined ? { computeMs: o.computeMs } : {}),
    ...(o.spin !== undefined ? { spin: o.spin } : {}),
  };
  const children: ChildProcess[] = [];
  const rows: CollRow[] = [];
  const spawnRank = (rank: number, address: string): ChildProcess => {
    const c = spawn(
      process.execPath,
      [...rankNodeArgs, '--import', tsxLoader, rankScript, JSON.stringify({ ...base, rank, address })],
      tiedToParent('pipe', 'inherit'),
    );
    children.push(c);
    return c;
  };
  try {
    const done = new Promise<void>((resolveDone, reject) => {
      const root = spawnRank(0, '127.0.0.1:0');
      let finished = 0;
      const exit = (rank: number) => (code: number | null) => {
        if (code !== 0)
          reject(
            new TandemError('COLL_ABORTED', `bench collectives: rank ${rank} exited with ${code}`, {
              hint: "see the rank's error above",
            }),
          );
        else if (++finished === o.ranks) resolveDone();
      };
      root.on('exit', exit(0));
      lines(root, (l) => {
        if (l.startsWith('LISTENING ')) {
          const address = l.slice(10).trim();
          for (let r = 1; r < o.ranks; r++) spawnRank(r, address).on('exit', exit(r));
        } else if (l.startsWith('ROW ')) {
          const raw = JSON.parse(l.slice(4)) as {
            bytes: number;
            time_us: number;
            p50_us?: number;
            algorithm: string;
            chosen: string;
          };
          const row = toRow(
            o.op,
            o.ranks,
            o.provider,
            raw.algorithm === 'auto' ? `auto:${raw.chosen}` : raw.algorithm,
            raw.bytes,
            raw.time_us,
            raw.p50_us,
          );
          rows.push(row);
          onRow(row);
        }
      });
    });
    await done;
    return rows;
  } finally {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  }
}

/**
 * The faster of two rounds, row by row: for each key the row with the lower time. `bench
 * collectives --repeat K` keeps the best of K alternated rounds for our rows and for the
 * anchor's alike, as a machine whose speed drifts only ever slows a round (one round each,
 * run one after the other, put the drift between them into the ratio).
 */
export function fasterRows<T extends { time_us: number }>(
  kept: readonly T[],
  round: readonly T[],
  key: (r: T) => string,
): T[] {
  const out = [...kept];
  for (const r of round) {
    const i = out.findIndex((k) => key(k) === key(r));
    if (i < 0) out.push(r);
    else if (r.time_us < (out[i] as T).time_us) out[i] = r;
  }
  return out;
}

/** Runs `run-anchors.sh allreduce` (Open MPI, 2 and 4 ranks, vader and tcp) and parses its JSON lines. */
export async function runAllreduceAnchors(script: string): Promise<AnchorRow[]> {
  const lines = await anchorLines(script, 'allreduce', 600_000);
  return lines.filter(
    (o): o is AnchorRow & Record<string, unknown> =>
      o.anchor === 'openmpi-allreduce' && typeof o.bytes === 'number',
  );
}

/** The Open MPI row matching ours: same ranks, same kind of transport, same bytes. */
export function anchorFor(anchors: readonly AnchorRow[], row: CollRow): AnchorRow | undefined {
  const btl = row.provider === 'tcp' ? 'tcp,self' : 'vader,self';
  return anchors.find((a) => a.ranks === row.ranks && a.btl === btl && a.bytes === row.bytes);
}

/**
 * The goals (issues 3 and 37), for the rows a 2-rank all-reduce run measured: over shm, 8 B
 * within 3x Open MPI's time and 1 MiB busbw at least Open MPI's; over tcp, 1 MiB busbw at
 * least Open MPI's.
 * Goals whose size was not run are left out; other runs have none.
 */
export function checkCollectiveGoals(rows: readonly CollRow[], anchors: readonly AnchorRow[]): GoalCheck[] {
  const row = (bytes: number): CollRow | undefined =>
    rows.find((r) => r.op === 'all-reduce' && r.ranks === 2 && r.bytes === bytes);
  const out: GoalCheck[] = [];
  const small = row(8);
  if (small?.provider === 'shm')
    out.push(
      goalCheck(
        'shm 2-rank 8 B all-reduce time <= 3x Open MPI',
        small.time_us,
        anchorFor(anchors, small)?.time_us,
        3,
        true,
      ),
    );
  const big = row(1 << 20);
  if (big?.provider === 'shm')
    out.push(
      goalCheck(
        'shm 2-rank 1 MiB all-reduce busbw >= Open MPI',
        big.busbw_GBps,
        anchorFor(anchors, big)?.busbw_GBps,
        1,
        false,
      ),
    );
  if (big?.provider === 'tcp')
    out.push(
      goalCheck(
        'tcp 2-rank 1 MiB all-reduce busbw >= Open MPI',
        big.busbw_GBps,
        anchorFor(anchors, big)?.busbw_GBps,
        1,
        false,
      ),
    );
  return out;
}

export function header(withAnchor: boolean): string {
  const base = `${'bytes'.padStart(12)} ${'algorithm'.padStart(10)} ${'time_us'.padStart(11)} ${'algbw GB/s'.padStart(11)} ${'busbw GB/s'.padStart(11)} ${'p50_us'.padStart(10)}`;
  return withAnchor
    ? `${base} ${'ompi us'.padStart(10)} ${'ompi busbw'.padStart(11)} ${'ratio'.padStart(7)}`
    : base;
}

export function formatRow(r: CollRow, anchor?: AnchorRow | null): string {
  const base = `${String(r.bytes).padStart(12)} ${r.algorithm.padStart(10)} ${r.time_us.toFixed(2).padStart(11)} ${r.algbw_GBps.toFixed(3).padStart(11)} ${r.busbw_GBps.toFixed(3).padStart(11)} ${(r.p50_us === undefined ? '-' : r.p50_us.toFixed(2)).padStart(10)}`;
  if (anchor === undefined) return base;
  // ratio: Open MPI's time over ours (our speed in units of its: above 1 is faster, as busbw / its busbw)
  const ratio = anchor && r.time_us > 0 ? (anchor.time_us / r.time_us).toFixed(2) : '-';
  return `${base} ${(anchor ? anchor.time_us.toFixed(2) : '-').padStart(10)} ${(anchor ? anchor.busbw_GBps.toFixed(3) : '-').padStart(11)} ${ratio.padStart(7)}`;
}
