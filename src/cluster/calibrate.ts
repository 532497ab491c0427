import { existsSync, readFileSync } from 'node:fs';
import { availableParallelism, totalmem } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { writeFileAtomically } from '../engine/format/atomic-file.js';
import { TandemError } from '../errors/index.js';
import { createKernels, GgmlType, rowBytes, type Kernels } from '../kernels/index.js';
import type { Calibration } from '../parallel/index.js';
import { cacheDir, ensureCacheDir } from './demo.js';
import { probeStream } from './speed.js';

/** Kernel calls a llama layer makes per token: 7 projections, 2 norms, attention, SwiGLU, 2 adds. */
const CALLS_PER_LAYER = 13;

export function calibrationPath(): string {
  return join(cacheDir(), 'plan-calibration.json');
}

/** Runs `call` until `ms` have passed (after 3 untimed calls); returns seconds per call. */
function secondsPerCall(call: () => void, ms: number): number {
  for (let i = 0; i < 3; i++) call();
  let calls = 0;
  const t0 = performance.now();
  let t = t0;
  while (t - t0 < ms) {
    call();
    calls++;
    t = performance.now();
  }
  return (t - t0) / 1000 / calls;
}

function q8Weight(k: Kernels, rows: number, cols: number, name: string): ReturnType<Kernels['uploadWeight']> {
  const data = new Uint8Array(rows * rowBytes(GgmlType.Q8_0, cols));
  for (let i = 0; i < data.length; i++) data[i] = (i * 131) & 0x3f;
  return k.uploadWeight({ type: GgmlType.Q8_0, rows, cols, data, name });
}

/**
 * Measures what `tandem plan` needs of this machine with tandem's own kernels on `threads`:
 * the rate decode streams Q8_0 weights from memory (a working set far beyond any cache),
 * prefill's FLOP/s (a 64-token Q8_0 matmul on a 2048-wide matrix), and the fixed cost a layer
 * pays per token (the time of CALLS_PER_LAYER calls on a matrix small enough to stay in cache).
 */
export async function calibrate(o: { threads: number; log?: (line: string) => void }): Promise<Calibration> {
  const log = o.log ?? (() => {});
  log(`calibrating on ${o.threads} thread(s): memory stream...`);
  const decodeBytesPerS = await probeStream({ threads: o.threads, bytes: 512 << 20, ms: 3000 });
  const kernels = await createKernels({ threads: o.threads });
  try {
    log('prefill matmul...');
    const cols = 2048;
    const rows = 2048;
    const n = 64;
    const w = q8Weight(kernels, rows, cols, 'calibrate-gemm');
    const x = new Float32Array(n * cols).fill(0.25);
    const y = new Float32Array(n * rows);
    const gemm = secondsPerCall(() => kernels.matmul(w, x, y, n), 1500);
    log('per-layer overhead...');
    const small = q8Weight(kernels, 64, 64, 'calibrate-small');
    const xs = new Float32Array(64).fill(0.25);
    const ys = new Float32Array(64);
    const call = secondsPerCall(() => kernels.matvec(small, xs, ys), 500);
    return {
      date: new Date().toISOString(),
      threads: o.threads,
      memoryBytes: totalmem(),
      cpuCores: availableParallelism(),
      decodeBytesPerS,
      prefillFlopsPerS: (2 * rows * cols * n) / gemm,
      layerOverheadMs: call * CALLS_PER_LAYER * 1000,
    };
  } finally {
    await kernels.close();
  }
}

export async function saveCalibration(c: Calibration, path = calibrationPath()): Promise<void> {
  ensureCacheDir(cacheDir());
  await writeFileAtomically(path, async (file) => {
    await file.writeFile(JSON.stringify(c, null, 2) + '\n');
  });
}

/** The saved calibration, or undefined when none was made; a damaged file is a typed error. */
export function loadCalibration(path = calibrationPath()): Calibration | undefined {
  if (!existsSync(path)) return undefined;
  try {
    const c = JSON.parse(readFileSync(path, 'utf8')) as Calibration;
    const numbers = [c.memoryBytes, c.decodeBytesPerS, c.prefillFlopsPerS, c.layerOverheadMs, c.threads];
    if (numbers.every((v) => typeof v === 'number' && Number.isFinite(v) && v > 0)) return c;
  } catch {
    // fall through to the error below
  }
  throw new TandemError('PAR_NOT_CALIBRATED', `plan: the calibration file ${path} is damaged`, {
    hint: 'run `tandem plan --calibrate` again to remeasure this machine',
    details: { path },
  });
}
