import { existsSync, readFileSync } from 'node:fs';
import { availableParallelism, totalmem } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { writeFileAtomically } from '../engine/format/atomic-file.js';
import { TandemError } from '../errors/index.js';
import { createKernels, GgmlType, rowBytes, type Kernels } from '../kernels/index.js';
import type { Calibration } from '../parallel/index.js';
import { cacheDir, ensureCacheDir } from './demo.js';
import { measureFixedCosts, median } from './calibrate-twin.js';
import { measureWakeMs } from './calibrate-wake.js';

/** Stream samples a calibration takes, and each one's length: a distribution, not one best case. */
const STREAM_SAMPLES = 8;
const STREAM_SAMPLE_MS = 400;
/** A sample within this share of the fastest one seen counts as the VM's fast mode. */
export const FAST_MODE_SHARE = 0.85;

export function calibrationPath(): string {
  return join(cacheDir(), 'plan-calibration.json');
}

/** Runs `call` until `ms` have passed (after `warm` untimed calls); returns seconds per call. */
function secondsPerCall(call: () => void, ms: number, warm = 3): number {
  for (let i = 0; i < warm; i++) call();
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

/** `rows` x `cols` Q8_0 bytes with finite f16 scales and small quants. */
function q8Bytes(rows: number, cols: number): Uint8Array {
  const data = new Uint8Array(rows * rowBytes(GgmlType.Q8_0, cols));
  for (let i = 0; i < data.length; i++) data[i] = (i * 131) & 0x3f;
  return data;
}

function q8Weight(k: Kernels, rows: number, cols: number, name: string): ReturnType<Kernels['uploadWeight']> {
  return k.uploadWeight({ type: GgmlType.Q8_0, rows, cols, data: q8Bytes(rows, cols), name });
}

/** FLOPs of the prefill probe's call: a 64-token Q8_0 matmul on a 2048 x 2048 matrix. */
const GEMM = { rows: 2048, cols: 2048, tokens: 64 } as const;
const GEMM_SAMPLE_MS = 200;

/**
 * `count` separate samples of the rate decode streams Q8_0 weights at on `threads`, bytes a
 * second each: a 512 MiB working set (far beyond any cache) of 16 MiB matrices of 2048
 * columns, uploaded once, each sample as many passes over all of them as fit in
 * STREAM_SAMPLE_MS (as probeStream, speed.ts). A VM that flips between a fast and a slow
 * mode shows both in the samples, where one long probe would average them. With `gemm`,
 * each stream sample is followed by one of the prefill probe (FLOP/s), so the two pair up
 * by the mode they saw.
 */
async function sampleRates(
  threads: number,
  count: number,
  gemm: boolean,
): Promise<{ stream: number[]; gemm: number[] }> {
  const kernels = await createKernels({ threads });
  try {
    const cols = 2048;
    const rows = Math.floor((16 << 20) / rowBytes(GgmlType.Q8_0, cols));
    const matrices = 32;
    const data = q8Bytes(rows, cols);
    const ws = Array.from({ length: matrices }, (_, i) =>
      kernels.uploadWeight({ type: GgmlType.Q8_0, rows, cols, data, name: `stream-sample-${i}` }),
    );
    const x = new Float32Array(cols).fill(0.5);
    const y = new Float32Array(rows);
    const pass = (): void => {
      for (const w of ws) kernels.matvec(w, x, y);
    };
    const g = gemm ? q8Weight(kernels, GEMM.rows, GEMM.cols, 'calibrate-gemm') : undefined;
    const gx = new Float32Array(gemm ? GEMM.tokens * GEMM.cols : 0).fill(0.25);
    const gy = new Float32Array(gemm ? GEMM.tokens * GEMM.rows : 0);
    const call = (): void => kernels.matmul(g!, gx, gy, GEMM.tokens);
    const bytes = matrices * rows * rowBytes(GgmlType.Q8_0, cols);
    pass();
    if (g) call();
    const out = { stream: [] as number[], gemm: [] as number[] };
    for (let i = 0; i < count; i++) {
      out.stream.push(bytes / secondsPerCall(pass, STREAM_SAMPLE_MS, 0));
      if (g)
        out.gemm.push((2 * GEMM.rows * GEMM.cols * GEMM.tokens) / secondsPerCall(call, GEMM_SAMPLE_MS, 0));
    }
    return out;
  } finally {
    await kernels.close();
  }
}

/** `count` samples of the decode stream rate on `threads` (bytes a second each; see sampleRates). */
export async function streamSamples(threads: number, count = STREAM_SAMPLES): Promise<number[]> {
  return (await sampleRates(threads, count, false)).stream;
}

/**
 * The calibration with its decode rate taken from `samples` (the median; the range from the
 * slowest to the fastest): a calibration's own samples merged with those taken around a run.
 */
export function withStreamSamples(c: Calibration, samples: readonly number[]): Calibration {
  const best = Math.max(...samples);
  return {
    ...c,
    decodeBytesPerS: median(samples),
    decodeBytesPerSRange: [Math.min(...samples), best],
    streamSamples: [...samples],
    fastShare: samples.filter((s) => s >= FAST_MODE_SHARE * best).length / samples.length,
  };
}

/**
 * Measures what `tandem plan` needs of this machine with tandem's own kernels on `threads`:
 * the rate decode streams Q8_0 weights from memory (STREAM_SAMPLES samples: the median and
 * the range), prefill's FLOP/s (a 64-token Q8_0 matmul on a 2048-wide matrix, sampled after
 * each stream sample: the median, and its ratio to the stream in the same mode), and what a
 * layer and a step cost beyond their weights (the narrow twin, calibrate-twin.ts).
 */
export async function calibrate(o: { threads: number; log?: (line: string) => void }): Promise<Calibration> {
  const log = o.log ?? (() => {});
  log(
    `calibrating on ${o.threads} thread(s): memory stream and prefill matmul (${STREAM_SAMPLES} samples each)...`,
  );
  const rates = await sampleRates(o.threads, STREAM_SAMPLES, true);
  const samples = rates.stream;
  const prefillFlopsPerS = median(rates.gemm);
  const prefillFlopsPerStreamByte = median(rates.gemm.map((f, i) => f / samples[i]!));
  const kernels = await createKernels({ threads: o.threads });
  try {
    log('fixed costs of a layer and a step (the narrow twin at two depths)...');
    const fixed = await measureFixedCosts(kernels, {
      bytesPerS: median(samples),
      flopsPerS: prefillFlopsPerS,
    });
    log('waking a sleeping thread...');
    const wakeMs = await measureWakeMs();
    return withStreamSamples(
      {
        date: new Date().toISOString(),
        threads: o.threads,
        memoryBytes: totalmem(),
        cpuCores: availableParallelism(),
        decodeBytesPerS: median(samples),
        prefillFlopsPerS,
        prefillFlopsPerStreamByte,
        ...fixed,
        wakeMs,
      },
      samples,
    );
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
