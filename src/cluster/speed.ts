import { performance } from 'node:perf_hooks';
import { createKernels, GgmlType, rowBytes, type KernelsBackend } from '../kernels/index.js';

/**
 * A node's compute speed for pipeline placement: the GFLOP/s of a Q8_0 matrix-vector product
 * (the decode hot path) on the node's own kernels and threads. About 0.1-0.3 s.
 */
export async function probeSpeed(o: { threads?: number; kernels?: KernelsBackend } = {}): Promise<number> {
  const kernels = await createKernels({
    ...(o.threads ? { threads: o.threads } : {}),
    ...(o.kernels ? { backend: o.kernels } : {}),
  });
  try {
    // 1024 x 2048 Q8_0 (2.2 MB): big enough to stream from memory, small enough to be quick.
    const rows = 1024;
    const cols = 2048;
    const data = new Uint8Array(rows * rowBytes(GgmlType.Q8_0, cols));
    for (let i = 0; i < data.length; i++) data[i] = (i * 131) & 0x3f; // finite f16 scales, small quants
    const w = kernels.uploadWeight({ type: GgmlType.Q8_0, rows, cols, data, name: 'speed-probe' });
    const x = new Float32Array(cols).fill(0.5);
    const y = new Float32Array(rows);
    for (let i = 0; i < 5; i++) kernels.matvec(w, x, y);
    let calls = 0;
    const t0 = performance.now();
    let t = t0;
    while (t - t0 < 100) {
      for (let i = 0; i < 10; i++) kernels.matvec(w, x, y);
      calls += 10;
      t = performance.now();
    }
    return (2 * rows * cols * calls) / ((t - t0) / 1000) / 1e9;
  } finally {
    await kernels.close();
  }
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
