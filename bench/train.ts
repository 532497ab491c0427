// `tandem bench train`: the training step of a llama shape on 1..N local data-parallel ranks
// (one compute thread each), with PyTorch's CPU step of the same shape, batch and threads as
// the anchor, measured in alternated rounds in the same run (best step of each kept).
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { trainShape } from '../src/engine/train/index.js';
import type { BenchRankConfig, BenchRankLine } from './train-rank.js';
import { formatTable } from './table.js';
import type { GemmKind } from '../src/kernels/backward/load-gemm.js';
import type { OptimizerSplit } from '../src/parallel/train/index.js';

export interface TrainBenchOptions {
  shape: string;
  nodes: number[];
  /** Compute threads per rank to measure each node count with, and PyTorch with (default [1]). */
  threads?: number[];
  /** The ranks' matrix products (default native). */
  kernels?: GemmKind;
  /** Fabric between the ranks (default shm: they share this host). */
  provider?: 'tcp' | 'shm';
  /** How ranks of 2 or more split the optimizer, each measured (default [sharded]). */
  optimizers?: OptimizerSplit[];
  batch: number;
  seq: number;
  /** Updates per round; the first of each round is a warm-up and not counted. */
  steps: number;
  rounds: number;
  /** Skip the PyTorch anchor. */
  noTorch?: boolean;
  log?: (line: string) => void;
}

export interface TrainBenchRow {
  nodes: number | 'pytorch';
  step_ms: number;
  /**
   * The least CPU time of a counted update (rank 0's process, all its threads): on a shared
   * machine, a figure that waiting for a core does not inflate.
   */
  cpu_ms: number;
  tokens_per_s: number;
  /**
   * Share of the step spent waiting for gradients with nothing left to compute (sharded: and
   * in the weights' all-gather, which follows the update).
   */
  comm_share: number;
  /** Share of the all-reduce time hidden behind the backward pass (0 with one node). */
  overlap: number;
  /** Compute threads per rank (PyTorch: its threads). */
  threads: number;
  /** How the ranks split the optimizer (absent for one node and PyTorch). */
  optimizer?: OptimizerSplit;
}

const rankScript = join(import.meta.dirname, 'train-rank.ts');
const torchScript = join(import.meta.dirname, 'train-torch.py');
const PYTHON = '/usr/bin/python3';

/** Whether Debian's python3-torch answers; the anchor is skipped (and said so) when not. */
export function torchAvailable(): boolean {
  return spawnSync(PYTHON, ['-c', 'import torch'], { timeout: 60_000 }).status === 0;
}

function lines(child: ReturnType<typeof spawn>, onLine: (l: string) => void): void {
  let buf = '';
  child.stdout?.setEncoding('utf8').on('data', (d: string) => {
    buf += d;
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      onLine(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
    }
  });
}

function exited(child: ReturnType<typeof spawn>, what: string, ms: number): Promise<void> {
  let err = '';
  child.stderr?.setEncoding('utf8').on('data', (d: string) => (err += d));
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${what} did not finish within ${ms} ms`));
    }, ms);
    child.once('exit', (code) => {
      clearTimeout(t);
      if (code === 0) resolve();
      else reject(new Error(`${what} exited with ${code}: ${err.slice(-1500)}`));
    });
  });
}

/** One round on `size` ranks: rank 0's per-update lines. */
async function tandemRound(
  o: TrainBenchOptions,
  size: number,
  threads: number,
  optimizer: OptimizerSplit | undefined,
): Promise<BenchRankLine[]> {
  const base = {
    ...(optimizer ? { optimizer } : {}),
    size,
    secret: randomBytes(8).toString('hex'),
    shape: o.shape,
    batch: o.batch,
    seq: o.seq,
    steps: o.steps,
    kernels: o.kernels ?? 'native',
    threads,
    provider: o.provider ?? 'shm',
  };
  const start = (rank: number, address: string): ReturnType<typeof spawn> => {
    const config: BenchRankConfig = { ...base, rank, address };
    return spawn(process.execPath, ['--import', 'tsx', rankScript, JSON.stringify(config)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  };
  const got: BenchRankLine[] = [];
  const zero = start(0, '127.0.0.1:0');
  const all = [exited(zero, 'rank 0', 600_000)];
  lines(zero, (l) => {
    const m = /^LISTENING (\S+)$/.exec(l);
    if (m) for (let r = 1; r < size; r++) all.push(exited(start(r, m[1] as string), `rank ${r}`, 600_000));
    else if (l.startsWith('{')) got.push(JSON.parse(l) as BenchRankLine);
  });
  await all[0];
  await Promise.all(all);
  return got;
}

interface TorchStep {
  ms: number;
  cpu_ms: number;
}

async function torchRound(o: TrainBenchOptions, threads: number): Promise<TorchStep[]> {
  const child = spawn(
    PYTHON,
    [
      torchScript,
      JSON.stringify({ shape: trainShape(o.shape), batch: o.batch, seq: o.seq, steps: o.steps, threads }),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const steps: TorchStep[] = [];
  lines(child, (l) => steps.push(JSON.parse(l) as TorchStep));
  await exited(child, 'pytorch', 600_000);
  return steps;
}

function rowOf(
  [nodes, threads, optimizer]: Config,
  best: BenchRankLine,
  cpuMs: number,
  o: TrainBenchOptions,
): TrainBenchRow {
  return {
    nodes,
    step_ms: best.ms,
    cpu_ms: cpuMs,
    tokens_per_s: (o.batch * o.seq * 1000) / best.ms,
    comm_share: best.exposedMs / best.ms,
    overlap: best.commMs > 0 ? Math.max(0, 1 - best.exposedMs / best.commMs) : 0,
    threads,
    ...(optimizer ? { optimizer } : {}),
  };
}

/** Nodes, threads a node, and how nodes of 2 or more split the optimizer. */
type Config = readonly [number, number, OptimizerSplit | undefined];

function configsOf(o: TrainBenchOptions): Config[] {
  const splits = o.optimizers ?? ['sharded'];
  return (o.threads ?? [1]).flatMap((t) =>
    o.nodes.flatMap((n): Config[] => (n === 1 ? [[n, t, undefined]] : splits.map((x) => [n, t, x]))),
  );
}

/** Alternates the configurations round by round; keeps each one's fastest counted update. */
export async function benchTrain(o: TrainBenchOptions): Promise<TrainBenchRow[]> {
  const threadCounts = o.threads ?? [1];
  const configs = configsOf(o);
  const best = new Map<string, BenchRankLine>();
  const cpuBest = new Map<string, number>();
  const torchBest = new Map<number, TorchStep>();
  const torch = !o.noTorch && torchAvailable();
  if (!o.noTorch && !torch)
    o.log?.('PyTorch is not installed (apt-get install python3-torch): no anchor row');
  for (let round = 0; round < o.rounds; round++) {
    for (const t of torch ? threadCounts : []) {
      const steps = (await torchRound(o, t)).slice(1);
      const ms = Math.min(...steps.map((x) => x.ms));
      const cpu = Math.min(...steps.map((x) => x.cpu_ms));
      const had = torchBest.get(t);
      torchBest.set(t, {
        ms: Math.min(had?.ms ?? Infinity, ms),
        cpu_ms: Math.min(had?.cpu_ms ?? Infinity, cpu),
      });
      o.log?.(
        `round ${round + 1}: pytorch x ${t} thread(s) ${ms.toFixed(0)} ms/step (cpu ${cpu.toFixed(0)} ms)`,
      );
    }
    for (const [n, t, x] of configs) {
      const steps = (await tandemRound(o, n, t, x)).slice(1);
      const fastest = steps.reduce((a, b) => (b.ms < a.ms ? b : a));
      const key = `${n}x${t}${x ?? ''}`;
      if (!best.has(key) || fastest.ms < best.get(key)!.ms) best.set(key, fastest);
      const cpu = Math.min(...steps.map((x) => x.cpuMs));
      cpuBest.set(key, Math.min(cpuBest.get(key) ?? Infinity, cpu));
      o.log?.(
        `round ${round + 1}: ${n} node(s) x ${t} thread(s)${x ? ` ${x}` : ''} ${fastest.ms.toFixed(0)} ms/step (cpu ${cpu.toFixed(0)} ms)`,
      );
    }
  }
  const rows: TrainBenchRow[] = configs.map((c) => {
    const key = `${c[0]}x${c[1]}${c[2] ?? ''}`;
    return rowOf(c, best.get(key)!, cpuBest.get(key)!, o);
  });
  for (const [t, b] of torchBest)
    rows.push({
      nodes: 'pytorch',
      step_ms: b.ms,
      cpu_ms: b.cpu_ms,
      tokens_per_s: (o.batch * o.seq * 1000) / b.ms,
      comm_share: 0,
      overlap: 0,
      threads: t,
    });
  return rows;
}

export function trainTable(rows: readonly TrainBenchRow[]): string {
  // each row against PyTorch on as many threads as the row's process has
  const torch = (t: number): TrainBenchRow | undefined =>
    rows.find((r) => r.nodes === 'pytorch' && r.threads === t);
  return formatTable(
    [
      'nodes',
      'step ms',
      'cpu ms',
      'tokens/s',
      'comm share',
      'overlap',
      'threads',
      'optimizer',
      'x pytorch',
      'x pytorch cpu',
    ],
    rows.map((r) => [
      String(r.nodes),
      r.step_ms.toFixed(0),
      r.cpu_ms.toFixed(0),
      r.tokens_per_s.toFixed(0),
      r.comm_share.toFixed(3),
      r.overlap.toFixed(2),
      String(r.threads),
      r.optimizer ?? '-',
      torch(r.threads) ? (torch(r.threads)!.step_ms / r.step_ms).toFixed(2) : '-',
      torch(r.threads) ? (torch(r.threads)!.cpu_ms / r.cpu_ms).toFixed(2) : '-',
    ]),
  );
}
