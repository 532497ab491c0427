import { performance } from 'node:perf_hooks';
import { createKernels, GgmlType, rowBytes, type Kernels, type KernelsBackend } from '../kernels/index.js';

interface ProbeOptions {
  threads?: number;
  kernels?: KernelsBackend;
}

/**
 * Runs `pass` (one pass of matvecs) until `ms` have passed, after a few untimed passes;
 * returns passes per second.
 */
function passesPerSecond(pass: () => void, ms: number): number {
  for (let i = 0; i < 3; i++) pass();
  let passes = 0;
  const t0 = performance.now();
  let t = t0;
  while (t - t0 < ms) {
    pass();
    passes++;
    t = performance.now();
  }
  return passes / ((t - t0) / 1000);
}

/** `rows` x `cols` Q8_0 bytes with finite f16 scales and small quants. */
function q8Bytes(rows: number, cols: number): Uint8Array {
  const data = new Uint8Array(rows * rowBytes(GgmlType.Q8_0, cols));
  for (let i = 0; i < data.length; i++) data[i] = (i * 131) & 0x3f;
  return data;
}

async function withKernels<T>(o: ProbeOptions, run: (k: Kernels) => T): Promise<T> {
  const kernels = await createKernels({
    ...(o.threads ? { threads: o.threads } : {}),
    ...(o.kernels ? { backend: o.kernels } : {}),
  });
  try {
    return run(kernels);
  } finally {
    await kernels.close();
  }
}

/**
 * A node's compute speed for pipeline placement: the GFLOP/s of a Q8_0 matrix-vector product
 * (the decode hot path) on the node's own kernels and threads. About 0.1-0.3 s.
 */
export function probeSpeed(o: ProbeOptions = {}): Promise<number> {
  return withKernels(o, (kernels) => {
    // 1024 x 2048 Q8_0 (2.2 MB): big enough to stream from memory, small enough to be quick.
    const rows = 1024;
    const cols = 2048;
    const w = kernels.uploadWeight({
      type: GgmlType.Q8_0,
      rows,
      cols,
      data: q8Bytes(rows, cols),
      name: 'speed-probe',
    });
    const x = new Float32Array(cols).fill(0.5);
    const y = new Float32Array(rows);
    const calls = 10;
    const rate = passesPerSecond(() => {
      for (let i = 0; i < calls; i++) kernels.matvec(w, x, y);
    }, 100);
    return (2 * rows * cols * calls * rate) / 1e9;
  });
}

/** Bounds of a stream probe's working set (see probeStream). */
export const STREAM_PROBE_MIN_BYTES = 64 << 20;
export const STREAM_PROBE_MAX_BYTES = 3 * 2 ** 30;

/**
 * The weight bytes per second a node's Q8_0 matvec streams when the weights are `bytes` in
 * all, far more than any cache holds: the rate decode streams them at (bound by memory or by
 * the matvec's arithmetic, whichever is slower on the machine at the time). The working
 * set is uploaded as 16 MiB matrices of 2048 columns (TinyLlama's width) and each pass
 * multiplies by every one of them, as a token's decode passes over every weight once.
 * `bench cluster` runs it on one node alone and then on every node of a split at once: the
 * ratio is what a split can gain at most when the nodes share one machine's memory.
 */
export function probeStream(o: ProbeOptions & { bytes: number; ms: number }): Promise<number> {
  return withKernels(o, (kernels) => {
    const cols = 2048;
    const rows = Math.floor((16 << 20) / rowBytes(GgmlType.Q8_0, cols));
    const data = q8Bytes(rows, cols);
    const count = Math.max(1, Math.round(o.bytes / data.length));
    const ws = Array.from({ length: count }, (_, i) =>
      kernels.uploadWeight({ type: GgmlType.Q8_0, rows, cols, data, name: `stream-probe-${i}` }),
    );
    const x = new Float32Array(cols).fill(0.5);
    const y = new Float32Array(rows);
    const rate = passesPerSecond(() => {
      for (const w of ws) kernels.matvec(w, x, y);
    }, o.ms);
    return rate * count * data.length;
  });
}

/**
 * Relative speeds for placement: a node's hostfile `speed=` wins; otherwise its measured
 * GFLOP/s relative to the fastest measured node, in steps of 1/4 (measurement noise of a few
 * percent must not move layers around); 1 when nothing is known.
 */
export function nodeSpeeds(
  given: readonly (number | undefined)[],
  measured: readonly (number | undefined)[],
): (number | undefined)[] {
  const known = measured.filter((m): m is number => typeof m === 'number' && m > 0);
  const fastest = known.length > 0 ? Math.max(...known) : 0;
  return given.map((g, i) => {
    if (g !== undefined) return g;
    const m = measured[i];
    if (!(typeof m === 'number' && m > 0 && fastest > 0)) return undefined;
    return Math.max(0.25, Math.round((4 * m) / fastest) / 4);
  });
}
