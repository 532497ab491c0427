// One rank of `tandem bench collectives`. argv: JSON RankConfig. Rank 0 prints
// `LISTENING host:port` and then one `ROW {json}` per size; every rank prints `DONE`.
import { writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import type { Communicator } from './communicator.js';
import { createCommunicator } from './create-communicator.js';
import { DirectExchange, usesDirectExchange } from './one-sided/index.js';
import { flatTree, sumTree, treeSpares } from '../kernels/reduce-native.js';
import type { Algorithm } from './call.js';
import type { ProviderName } from '../fabric/index.js';
import { exitWithParent } from '../util/exit-with-parent.js';

/**
 * The collectives' calls, and `tp-exchange`: tensor parallel's sum of partial results
 * (DirectExchange: each rank writes its whole part into every peer's slot, then every rank
 * sums the parts in one fixed order), as a tensor-parallel layer's all-reduce runs it.
 */
export type BenchOp =
  'all-reduce' | 'all-gather' | 'reduce-scatter' | 'broadcast' | 'all-to-all' | 'tp-exchange';

export interface RankConfig {
  rank: number;
  size: number;
  provider: ProviderName;
  address: string;
  op: BenchOp;
  algorithm?: Algorithm;
  /** Bytes per size in nccl-tests terms (see bench/collectives.ts). */
  sizes: number[];
  iterations?: number;
  /**
   * When set, every call follows `computeMs` of arithmetic on each rank (a tensor-parallel
   * layer's share of a prompt before its exchange) and a row's time is the mean, over the
   * ranks and the calls, of each call from the rank's arrival to its leaving: the wait for the
   * latest rank (a rank preempted mid-chunk arrives late) and the transfer.
   */
  computeMs?: number;
  /** tp-exchange: how its waits busy-poll (DirectExchangeOptions.spin; a node's exchangeSpin). */
  spin?: boolean | number;
}

/**
 * Timed calls per size, as the Open MPI anchor counts them (mpi_allreduce.c: 1,000 below
 * 1 MiB, 50 up to 16 MiB, 10 from 16 MiB), so both means are taken over as many calls: with
 * rare millisecond stalls on this VM, a mean over fewer calls is luckier. `base` scales all
 * three (at least 3 calls).
 */
export function iterationsFor(bytes: number, base = 1000): number {
  const share = bytes >= 16 << 20 ? 100 : bytes >= 1 << 20 ? 20 : 1;
  return Math.max(3, Math.round(base / share));
}

/**
 * Untimed calls before the timed ones: enough (up to 1,000, like perftests' -w) that V8 has
 * compiled the call path: over the first few thousand calls of a fresh rank a small call runs
 * uncompiled code and is several times slower (docs/collectives.md, "Measured facts behind
 * the constants"). Capped at ~128 MiB of payload per size.
 */
export function warmupsFor(bytes: number, iterations: number): number {
  return Math.max(
    2,
    Math.floor(iterations / 10),
    Math.min(1000, Math.floor((128 << 20) / Math.max(bytes, 1))),
  );
}

/**
 * Warm-up by time as well as by count, at every size: V8 keeps compiling a rank's call path
 * for seconds, and each compile on a background thread takes a core from one of the two
 * spinning ranks, so a count alone leaves compiles (and their millisecond stalls) inside the
 * timed calls, most of all at a size whose algorithm is new (the ring's, after mesh sizes).
 * The stalls are the optimising compiler's: `--no-opt` removes them. 3 s covers the compiles
 * on the 2-core VM (docs/collectives.md, "Benchmark" and "Measured facts behind the
 * constants"). TANDEM_BENCH_WARMUP_MS sets it.
 */
const WARMUP_MS = Number(process.env.TANDEM_BENCH_WARMUP_MS ?? 3000);

/** TANDEM_BENCH_TRACE=<prefix>: each rank writes every timed call's duration (us), in call order, to <prefix>.<rank>.<bytes>. */
const tracePrefix = process.env.TANDEM_BENCH_TRACE;

/** One call of `op` whose nccl-tests size is `bytes` (f32 values). */
function operation(
  c: Communicator,
  op: BenchOp,
  bytes: number,
  algorithm: Algorithm | undefined,
): () => Promise<unknown> {
  const n = c.size;
  const alg = algorithm ? { algorithm } : {};
  const elems = Math.max(1, Math.floor(bytes / 4));
  switch (op) {
    case 'all-reduce': {
      const d = new Float32Array(elems).fill(c.rank);
      return () => c.allReduce(d, alg);
    }
    case 'all-gather': {
      const per = Math.max(1, Math.floor(elems / n));
      const d = new Float32Array(per).fill(c.rank);
      const out = new Float32Array(per * n);
      return () => c.allGather(d, { ...alg, out });
    }
    case 'reduce-scatter': {
      const d = new Float32Array(elems).fill(c.rank);
      return () => c.reduceScatter(d, alg);
    }
    case 'broadcast': {
      const d = new Float32Array(elems).fill(c.rank);
      return () => c.broadcast(d, 0, alg);
    }
    case 'all-to-all': {
      const per = Math.max(1, Math.floor(elems / n));
      const d = new Float32Array(per * n).fill(c.rank);
      const counts = new Array<number>(n).fill(per);
      return () => c.allToAll(d, counts, counts);
    }
    case 'tp-exchange': {
      const d = new Float32Array(elems).fill(c.rank);
      if (!usesDirectExchange(config.provider)) return gatherSum(c, d);
      let ex: Promise<DirectExchange> | undefined;
      return async () => {
        // connected by every rank's first call (a collective over the group), closed at the end
        ex ??= DirectExchange.connect({
          group: c,
          provider: config.provider,
          host: '127.0.0.1',
          secret: 'tandem-bench',
          ...(config.spin !== undefined ? { spin: config.spin } : {}),
        }).then((e) => (exchanges.push(e), e));
        await (await ex).allReduceSum(d);
      };
    }
  }
}

/**
 * tp-exchange where the nodes do not connect the direct exchange (tcp, rdma): their groups sum
 * through the communicator (the parallel layer's CollectiveShardComm): 2 ranks of one part
 * each all-reduce; more ranks gather every rank's part and each adds them in the flat tree.
 */
function gatherSum(c: Communicator, d: Float32Array): () => Promise<unknown> {
  const n = c.size;
  if (n === 2) return () => c.allReduce(d);
  const all = new Float32Array(d.length * n);
  const parts = Array.from({ length: n }, (_, r) => all.subarray(r * d.length, (r + 1) * d.length));
  const tree = flatTree(n);
  const spare = Array.from({ length: treeSpares(tree) }, () => new Float32Array(d.length));
  return async () => {
    await c.allGather(d, { out: all });
    sumTree(tree, parts, d, spare);
  };
}

/** The algorithm a row reports: tp-exchange's own (direct, or gather-sum through the communicator), else the one the communicator last chose. */
function chosenAlgorithm(): string {
  if (config.op !== 'tp-exchange') return comm.lastAlgorithm ?? 'mesh';
  return usesDirectExchange(config.provider) ? 'direct' : 'gather-sum';
}

/** The tp-exchanges this rank connected, closed before its communicator. */
const exchanges: DirectExchange[] = [];

/**
 * Runs `each.length` calls, each one's duration (ms) into `each`; returns the total (ms). The
 * warm-up runs through this same loop, so the timed calls do not pay for compiling it: a loop
 * of their own would be compiled while they run, and the call it lands on would carry that
 * compile's time (docs/collectives.md, "Measured facts behind the constants").
 */
async function timeCalls(run: () => Promise<unknown>, each: Float64Array): Promise<number> {
  const t0 = performance.now();
  for (let i = 0, t = t0; i < each.length; i++) {
    await run();
    const now = performance.now();
    each[i] = now - t;
    t = now;
  }
  return performance.now() - t0;
}

/** Runs `calls` calls; returns their total time (ms), read from the clock before and after only. */
async function timeLoop(run: () => Promise<unknown>, calls: number): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < calls; i++) await run();
  return performance.now() - t0;
}

/**
 * `calls` calls, then rounds of them until `ms` have passed on rank 0 (the ranks agree on when
 * to stop). Each round ends with the barrier that precedes the timed calls, so that V8 has seen
 * it before them: a first barrier after the warm-up deoptimises the shared send path (the
 * queue pair's post, the Call constructor: "wrong map"), and the timed calls then recompile it
 * on a background thread, which takes a core from a spinning rank and puts millisecond stalls
 * into the timed calls (docs/collectives.md, "The board, and what a closure costs under tsx").
 */
async function warmUp(run: () => Promise<unknown>, calls: number, ms: number): Promise<void> {
  const t0 = performance.now();
  const more = new Float32Array(1);
  const each = new Float64Array(calls);
  for (;;) {
    // the same sequence as the timed calls (loop, barrier, timed loop), so none of it compiles then
    await timeLoop(run, calls);
    await comm.barrier();
    await timeCalls(run, each);
    more[0] = comm.rank === 0 && performance.now() - t0 < ms ? 1 : 0;
    await comm.allReduce(more, { op: 'max', algorithm: 'mesh' });
    await comm.barrier();
    if (more[0] === 0) return;
  }
}

exitWithParent();
const config = JSON.parse(process.argv[2] as string) as RankConfig;
const print = (line: string): void => void process.stdout.write(line + '\n');
const comm = await createCommunicator({
  rank: config.rank,
  size: config.size,
  provider: config.provider,
  rendezvous: { kind: 'root', address: config.address },
  secret: 'tandem-bench',
  timeoutMs: 120_000,
  // a rank waits for the others as `--nodes` waits for its nodes: TANDEM_NODE_START_MS raises it
  // on slow or emulated machines (docs/cluster.md; `tandem bench collectives` checked it)
  connectTimeoutMs: Number(process.env.TANDEM_NODE_START_MS) || 60_000,
  onListening: (a) => print(`LISTENING ${a}`),
});
/**
 * Arithmetic that takes `ms` at the ranks' fastest (each rank times it, all take the least
 * time, so every rank runs the same amount, as a tensor-parallel layer gives each rank an
 * equal share): the chunk before each call in computeMs mode. Its result goes to `sunk` so
 * that it is not optimised away.
 */
async function chunkOf(ms: number): Promise<() => void> {
  const buf = new Float64Array(4096).fill(1.5);
  const work = (reps: number): void => {
    let s = 0;
    for (let r = 0; r < reps; r++) for (let i = 0; i < buf.length; i++) s += (buf[i] as number) * 1.0000001;
    sunk.value += s;
  };
  let per = Infinity;
  for (let t = 0; t < 5; t++) {
    const t0 = performance.now();
    work(4);
    per = Math.min(per, (performance.now() - t0) / 4);
  }
  const fastest = Float32Array.of(per);
  await comm.allReduce(fastest, { op: 'min', algorithm: 'mesh' });
  const reps = Math.max(1, Math.round(ms / Math.max(fastest[0] as number, 1e-4)));
  return () => work(reps);
}
const sunk = { value: 0 };

/** computeMs mode: `iters` untimed rounds, then `iters` timed ones; the mean call, ms, over all ranks. */
async function afterChunks(run: () => Promise<unknown>, computeMs: number, iters: number): Promise<number> {
  const chunk = await chunkOf(computeMs);
  let spent = 0;
  for (let i = 0; i < 2 * iters; i++) {
    chunk();
    const arrived = performance.now();
    await run();
    if (i >= iters) spent += performance.now() - arrived;
  }
  const sum = Float32Array.of(spent / iters);
  await comm.allReduce(sum, { op: 'sum', algorithm: 'mesh' });
  return (sum[0] as number) / comm.size;
}

for (const bytes of config.sizes) {
  const run = operation(comm, config.op, bytes, config.algorithm);
  if (config.computeMs !== undefined) {
    const iters = iterationsFor(bytes, config.iterations);
    const us = (await afterChunks(run, config.computeMs, iters)) * 1000;
    if (config.rank === 0)
      print(
        `ROW ${JSON.stringify({ bytes, time_us: us, iterations: iters, algorithm: config.algorithm ?? 'auto', chosen: chosenAlgorithm() })}`,
      );
    continue;
  }
  const iters = iterationsFor(bytes, config.iterations);
  await warmUp(run, warmupsFor(bytes, iters), WARMUP_MS); // ends with a barrier
  // the mean as the anchor takes it: one clock reading before and after the calls (a reading
  // per call would weigh on an 8 B call: docs/collectives.md, "Benchmark"); then the same
  // number of calls again, each timed, for the median
  const us = ((await timeLoop(run, iters)) * 1000) / iters;
  await comm.barrier();
  const each = new Float64Array(iters);
  await timeCalls(run, each);
  if (tracePrefix)
    writeFileSync(
      `${tracePrefix}.${config.rank}.${bytes}`,
      Array.from(each, (x) => (x * 1000).toFixed(1)).join('\n') + '\n',
    );
  each.sort();
  const p50 = (each[Math.floor(iters / 2)] as number) * 1000;
  const chosen = chosenAlgorithm();
  // the slowest rank's mean (nccl-tests' and Open MPI's statistic) and median
  const worst = Float32Array.of(us, p50);
  await comm.allReduce(worst, { op: 'max', algorithm: 'mesh' });
  if (config.rank === 0)
    print(
      `ROW ${JSON.stringify({ bytes, time_us: worst[0], p50_us: worst[1], iterations: iters, algorithm: config.algorithm ?? 'auto', chosen })}`,
    );
}
for (const e of exchanges) await e.close();
await comm.close();
print('DONE');
