/**
 * Fabric benchmark between two real processes (like ib_write_lat / ib_write_bw):
 * - latency: ping-pong of RDMA WRITE WITH IMMEDIATE of `bytes`; half of each round trip. Like
 *   ib_write_lat and ucx_perftest, each side busy-polls its completion queue (`cq.pollOne()`, the
 *   public API) for the reply; a second pass waits with `await cq.wait()` instead (its spin,
 *   then doorbell sleep, and the promise turns), reported as `wait_latency_us_p50/p99`;
 * - bandwidth: a window of RDMA WRITEs of `bytes` one way, the last with an immediate,
 *   answered by a zero-byte write_imm; bytes / time.
 * This process is rank 0 (listener); bench-peer.ts is rank 1 (a child process).
 * Run by `tandem bench fabric` (or `node --import tsx bench/fabric.ts`).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { TandemError } from '../errors/index.js';
import {
  Access,
  expectSuccess,
  openDevice,
  type CompletionQueue,
  type MemoryRegion,
  type ProviderName,
  type QueuePair,
  type RecvWr,
  type RemoteRegion,
  type SendWr,
  type WorkCompletion,
} from './index.js';

export const DEFAULT_SIZES = [8, 64, 512, 4096, 32768, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20];

export interface BenchRow {
  provider: ProviderName;
  op: 'latency' | 'bandwidth';
  bytes: number;
  latency_us_p50: number | null;
  latency_us_p99: number | null;
  bandwidth_MBps: number | null;
  /** Latency rows: the same ping-pong completed through `await cq.wait()` instead of busy `poll()`. */
  wait_latency_us_p50?: number | null;
  wait_latency_us_p99?: number | null;
}

export interface Plan {
  sizes: number[];
  /** Latency round trips for the smallest sizes (fewer for large ones). */
  iterations: number;
  /** Untimed round trips of each latency pass last at least this long (default WARMUP_MS). */
  warmupMs?: number;
}

/**
 * Warm-up by time as well as by count: V8 keeps optimising the ping-pong's path for about a
 * second after it starts (recompiles on a background thread, which takes a core from one
 * of the two spinning processes on a 2-core machine), and a pass timed meanwhile measures
 * that, not the fabric (docs/fabric.md, "Measured facts"). TANDEM_BENCH_WARMUP_MS sets it,
 * as for bench collectives.
 */
const WARMUP_MS = Number(process.env.TANDEM_BENCH_WARMUP_MS ?? 1000);

/** The immediate that ends a latency pass: the peer stops echoing (and does not answer it). */
export const END_PASS = 6;

/** Round trips and writes per size: bounded so every size takes well under a second or two. */
export function counts(bytes: number, iterations: number): { lat: number; warm: number; bw: number } {
  const lat = Math.max(5, Math.min(iterations, Math.floor((512 << 20) / bytes)));
  const bw = Math.max(8, Math.min(20 * iterations, Math.floor((1 << 30) / bytes)));
  // Warm-up as perftests' -w: enough round trips for V8 to optimise the loop and for the
  // adaptive spin window to settle, but never more than the timed count.
  return { lat, warm: Math.max(2, Math.min(lat, Math.max(Math.floor(lat / 10), 1000))), bw };
}

/** `8`, `4K`, `4KiB`, `64M`, `1G` -> bytes. */
export function parseSize(text: string): number {
  const m = /^(\d+)\s*([kmg]?)(i?b)?$/i.exec(text.trim());
  if (!m) {
    throw new TandemError('INVALID_ARGUMENT', `cannot read size '${text}'`, {
      hint: 'write sizes like 8, 4K, 4M or 64MiB',
    });
  }
  const mult = { '': 1, k: 1024, m: 1 << 20, g: 1 << 30 }[(m[2] ?? '').toLowerCase()] ?? 1;
  const n = Number(m[1]) * mult;
  if (n < 1 || n > 1 << 30)
    throw new TandemError('INVALID_ARGUMENT', `size ${text} is outside 1 B..1 GiB`, {
      hint: 'pick sizes from 8 B to 64 MiB',
    });
  return n;
}

export interface Endpoint {
  qp: QueuePair;
  cq: CompletionQueue;
  rcq: CompletionQueue;
  local: MemoryRegion;
  remote: RemoteRegion;
}

// a window of 4 MiB writes on a device under software emulation (the soft-RoCE guest, a few MB/s) takes ~40 s
const WAIT = { timeoutMs: 120_000 };

export function remoteOf(info: Readonly<Record<string, unknown>>): RemoteRegion {
  const r = info.region as { addr: string; rkey: number; length: number } | undefined;
  if (r === undefined)
    throw new TandemError('INTERNAL', 'peer sent no region', { hint: 'a bug in the benchmark' });
  return { addr: BigInt(r.addr), rkey: r.rkey, length: r.length };
}

const NO_SGL: [] = [];
/** The receive every reply reposts (postRecv reads it, keeps nothing of it). */
const RECV: RecvWr = { wrId: 0, sgl: NO_SGL };
/** Busy-polling yields to the event loop this often (peer-loss events, timers). */
const YIELD_MS = 2;
/** Empty polls between two reads of the clock in spinImm (a power of 2; ~20-30 us of polls). */
const CLOCK_EVERY = 1024;

/**
 * Waits for one receive-with-immediate and reposts a receive. `poll`: busy-polls `cq.poll(1)`
 * (what verbs perftests do), turning the event loop every YIELD_MS; else `await cq.wait()`.
 */
export async function awaitImm(e: Endpoint, poll = false): Promise<number> {
  if (poll) {
    const imm = spinImm(e);
    if (imm !== undefined) return imm;
  }
  return awaitImmSlow(e, poll);
}

/**
 * Synchronous busy-poll for one receive-with-immediate, for up to YIELD_MS; reposts the
 * receive. The fast path of awaitImm: no promise is created while the reply is in flight.
 */
export function spinImm(e: Endpoint): number | undefined {
  let wc = e.rcq.pollOne();
  // the clock (tens of ns a read) is read every CLOCK_EVERY polls, so that a reply arriving
  // within the first microseconds never waits behind a read of it
  let start = -1;
  for (let i = 1; wc === undefined; i++) {
    wc = e.rcq.pollOne();
    if ((i & (CLOCK_EVERY - 1)) === 0 && wc === undefined) {
      const now = performance.now();
      if (start < 0) start = now;
      else if (now - start > YIELD_MS) return undefined;
    }
  }
  if (wc.status !== 'success') expectSuccess([wc]);
  e.qp.postRecv(RECV);
  return wc.imm ?? -1;
}

async function awaitImmSlow(e: Endpoint, poll: boolean): Promise<number> {
  let wc: WorkCompletion | undefined;
  if (poll) {
    wc = e.rcq.poll(1)[0];
    if (wc === undefined) {
      const start = performance.now();
      let turn = start;
      for (let i = 1; wc === undefined; i++) {
        wc = e.rcq.poll(1)[0];
        if ((i & 63) === 0 && wc === undefined) {
          const now = performance.now();
          if (now - start > WAIT.timeoutMs)
            throw new TandemError('FABRIC_WAIT_TIMEOUT', `no reply within ${WAIT.timeoutMs} ms`, {
              hint: 'the benchmark peer is gone or stuck',
            });
          if (now - turn > YIELD_MS) {
            await new Promise((r) => setImmediate(r));
            turn = performance.now();
          }
        }
      }
    }
    expectSuccess([wc]);
  } else {
    [wc] = expectSuccess(await e.rcq.wait({ ...WAIT, max: 1 }));
  }
  e.qp.postRecv({ wrId: 0, sgl: NO_SGL });
  return wc?.imm ?? -1;
}

/** Work requests built once per (endpoint, size, immediate), as verbs perftests do. */
const prebuilt = new WeakMap<Endpoint, Map<number, SendWr>>();

export function writeImm(e: Endpoint, bytes: number, imm: number): void {
  e.qp.postSend(immWr(e, bytes, imm));
}

/** The write_imm of `bytes` with immediate `imm` on `e`, built on first use. */
export function immWr(e: Endpoint, bytes: number, imm: number): SendWr {
  let m = prebuilt.get(e);
  if (m === undefined) prebuilt.set(e, (m = new Map()));
  const key = bytes * 16 + imm;
  let wr = m.get(key);
  if (wr === undefined) {
    wr = {
      wrId: imm,
      opcode: 'write_imm',
      imm,
      sgl: [e.local.sge(0, bytes)],
      remote: e.remote,
      signaled: false,
    };
    m.set(key, wr);
  }
  return wr;
}

/** Writes `count` x `bytes`, at most `window` in flight, the last with an immediate. */
export async function stream(e: Endpoint, bytes: number, count: number): Promise<void> {
  const window = Math.max(2, Math.min(64, Math.floor((64 << 20) / bytes)));
  let inFlight = 0;
  for (let i = 0; i < count; i++) {
    if (inFlight >= window) inFlight -= expectSuccess(await e.cq.wait({ ...WAIT })).length;
    const last = i === count - 1;
    e.qp.postSend({
      wrId: i,
      opcode: last ? 'write_imm' : 'write',
      imm: 1,
      sgl: [e.local.sge(0, bytes)],
      remote: e.remote,
    });
    inFlight++;
  }
  while (inFlight > 0) inFlight -= expectSuccess(await e.cq.wait({ ...WAIT })).length;
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

const round = (x: number, digits: number): number => Number(x.toFixed(digits));

async function measure(
  provider: ProviderName,
  e: Endpoint,
  plan: Plan,
  onRow: (r: BenchRow) => void,
): Promise<void> {
  for (const bytes of plan.sizes) {
    const n = counts(bytes, plan.iterations);
    const passes: number[][] = [];
    for (const poll of [true, false]) {
      const half: number[] = [];
      const wr = immWr(e, bytes, 2);
      // one loop for the untimed and the timed round trips, so the code timed is the code warmed
      const warmUntil = performance.now() + (plan.warmupMs ?? WARMUP_MS);
      for (let i = 0; half.length < n.lat; i++) {
        const t0 = performance.now();
        e.qp.postSend(wr);
        if (!poll || spinImm(e) === undefined) await awaitImm(e, poll);
        if (i >= n.warm && t0 >= warmUntil) half.push(((performance.now() - t0) * 1000) / 2);
      }
      e.qp.postSend(immWr(e, bytes, END_PASS));
      passes.push(half.sort((a, b) => a - b));
    }
    const [polled, waited] = passes as [number[], number[]];
    onRow({
      provider,
      op: 'latency',
      bytes,
      latency_us_p50: round(percentile(polled, 50), 2),
      latency_us_p99: round(percentile(polled, 99), 2),
      bandwidth_MBps: null,
      wait_latency_us_p50: round(percentile(waited, 50), 2),
      wait_latency_us_p99: round(percentile(waited, 99), 2),
    });
    await stream(e, bytes, Math.min(n.bw, 4)); // warm-up
    await awaitImm(e);
    const t0 = performance.now();
    await stream(e, bytes, n.bw);
    await awaitImm(e);
    const seconds = (performance.now() - t0) / 1000;
    onRow({
      provider,
      op: 'bandwidth',
      bytes,
      latency_us_p50: null,
      latency_us_p99: null,
      bandwidth_MBps: Number(((bytes * n.bw) / seconds / 1e6).toPrecision(4)),
    });
  }
}

/** Runs the benchmark: spawns the peer process, measures, returns the rows. */
export async function runFabricBench(
  provider: ProviderName,
  plan: Plan,
  onRow: (r: BenchRow) => void,
): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const secret = randomBytes(16).toString('hex');
  const dev = await openDevice(provider);
  const listener = await dev.listen({ host: '127.0.0.1', port: 0, secret });
  const maxBytes = Math.max(...plan.sizes);
  const child = spawn(
    process.execPath,
    [
      '--import',
      import.meta.resolve('tsx'),
      join(import.meta.dirname, 'bench-peer.ts'),
      provider,
      String(listener.port),
      JSON.stringify(plan),
    ],
    {
      stdio: ['ignore', 'inherit', 'inherit'],
      env: { ...process.env, TANDEM_BENCH_SECRET: secret },
    },
  );
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  try {
    const pd = dev.allocPd();
    const cq = dev.createCq();
    const rcq = dev.createCq();
    const local = pd.allocate(maxBytes, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
    const region = { addr: String(local.addr), rkey: local.rkey, length: local.length };
    const qp = await Promise.race([
      // a peer started under software emulation (the soft-RoCE guest) takes up to a minute
      listener.accept({ pd, cq, recvCq: rcq, info: { region }, timeoutMs: 120_000 }),
      exited.then((code) => {
        throw new TandemError(
          'FABRIC_CONNECT_FAILED',
          `the benchmark peer exited (code ${code}) before connecting`,
          { hint: 'run the peer by hand to see its error' },
        );
      }),
    ]);
    const e: Endpoint = { qp, cq, rcq, local, remote: remoteOf(qp.peerInfo) };
    for (let i = 0; i < 8; i++) qp.postRecv({ wrId: 0, sgl: [] });
    await measure(provider, e, plan, (r) => {
      rows.push(r);
      onRow(r);
    });
    await qp.close();
    return rows;
  } finally {
    await listener.close();
    await Promise.race([exited, new Promise((r) => setTimeout(r, 2000))]);
    child.kill('SIGKILL');
    await dev.close();
  }
}

export function formatRow(r: BenchRow): string {
  const size =
    r.bytes >= 1 << 20
      ? `${r.bytes / (1 << 20)} MiB`
      : r.bytes >= 1024
        ? `${r.bytes / 1024} KiB`
        : `${r.bytes} B`;
  if (r.op === 'latency')
    return (
      `${r.provider.padEnd(4)} latency    ${size.padStart(8)}  p50 ${String(r.latency_us_p50).padStart(9)} us  p99 ${String(r.latency_us_p99).padStart(9)} us` +
      (r.wait_latency_us_p50 == null
        ? ''
        : `   (await wait(): p50 ${String(r.wait_latency_us_p50)} us  p99 ${String(r.wait_latency_us_p99)} us)`)
    );
  return `${r.provider.padEnd(4)} bandwidth  ${size.padStart(8)}  ${String(r.bandwidth_MBps).padStart(10)} MB/s`;
}

export {
  anchorLines,
  anchorsScript,
  bestAnchors,
  bestBenchRows,
  checkGoals,
  formatGoal,
  formatGoalTable,
  goalCheck,
  runAnchors,
  withRounds,
  type Anchors,
  type GoalCheck,
} from './bench-anchors.js';
