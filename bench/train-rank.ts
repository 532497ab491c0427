// One rank of `tandem bench train` (bench/train.ts starts it): trains the given shape on a
// synthetic token stream for a few updates and prints one JSON line per update with its
// time and communication figures. argv: JSON BenchRankConfig. Rank 0 of a world of 2 or
// more prints `LISTENING host:port` first.
import { hashTokens, train, trainShape, type RunSettings } from '../src/engine/train/index.js';
import { loadGemm, type GemmKind } from '../src/kernels/backward/load-gemm.js';
import { trainRank, type OptimizerSplit, type SyncTimes } from '../src/parallel/train/index.js';

export interface BenchRankConfig {
  rank: number;
  size: number;
  address: string;
  secret: string;
  shape: string;
  batch: number;
  seq: number;
  steps: number;
  /** Matrix products and their threads per rank. */
  kernels: GemmKind;
  threads: number;
  /** Fabric between the ranks. */
  provider: 'tcp' | 'shm';
  /** How ranks of 2 or more split the optimizer (trainRank's default when absent). */
  optimizer?: OptimizerSplit;
}

export interface BenchRankLine {
  step: number;
  ms: number;
  /** CPU time of this process (all its threads) over the update. */
  cpuMs: number;
  commMs: number;
  exposedMs: number;
}

const c = JSON.parse(process.argv[2] as string) as BenchRankConfig;
const shape = trainShape(c.shape);
// a fixed pseudo-random stream: the figures do not depend on what is learnt
const tokens = Int32Array.from({ length: 1 << 16 }, (_, i) => (Math.imul(i, 2654435761) >>> 7) % shape.vocab);
const settings: RunSettings = {
  shapeName: c.shape,
  shape,
  seed: 1,
  steps: c.steps,
  batch: c.batch,
  seq: c.seq,
  lr: 1e-3,
  warmup: 1,
  minLrRatio: 0.1,
  weightDecay: 0.1,
  clip: 1,
  dataTokens: tokens.length,
  dataHash: hashTokens(tokens),
};
let times: SyncTimes = { commMs: 0, exposedMs: 0 };
let last = performance.now();
let lastCpu = process.cpuUsage();
const cfg = {
  settings,
  tokens,
  gemm: await loadGemm(c.kernels, c.threads, (why) => process.stderr.write(`${why}\n`), c.size * c.threads),
  onStep: (l: { step: number }) => {
    const now = performance.now();
    const cpu = process.cpuUsage(lastCpu);
    const line: BenchRankLine = {
      step: l.step,
      ms: now - last,
      cpuMs: (cpu.user + cpu.system) / 1000,
      commMs: times.commMs,
      exposedMs: times.exposedMs,
    };
    last = now;
    lastCpu = process.cpuUsage();
    if (c.rank === 0) process.stdout.write(`${JSON.stringify(line)}\n`);
  },
};
if (c.size === 1) await train(cfg);
else
  await trainRank(cfg, {
    rank: c.rank,
    size: c.size,
    rendezvous: c.address,
    secret: c.secret,
    provider: c.provider,
    threadsPerRank: c.threads,
    ...(c.optimizer ? { optimizer: c.optimizer } : {}),
    onListening: (a) => process.stdout.write(`LISTENING ${a}\n`),
    onTimes: (t) => (times = t),
  });
process.exit(0);
