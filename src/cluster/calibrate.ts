import { existsSync, readFileSync } from 'node:fs';
import { availableParallelism, totalmem } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { writeFileAtomically } from '../engine/format/atomic-file.js';
import { TandemError } from '../errors/index.js';
import { createKernels, GgmlType, rowBytes, type Kernels } from '../kernels/index.js';
import type { Calibration, PrefillShape } from '../parallel/index.js';
import { cacheDir, ensureCacheDir } from './demo.js';
import {
  DEFAULT_PREFILL_SHAPE,
  openPrefillProbe,
  prefillRates,
  probeable,
  type PrefillSample,
} from './calibrate-prefill.js';
import { decodeRates, openDecodeProbe, type DecodeSample } from './calibrate-decode.js';
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

/** Stream samples, each paired with the prefill and decode probes' samples that followed it (when probed). */
interface Samples {
  stream: number[];
  prefill: PrefillSample[];
  decode: DecodeSample[];
}

/**
 * The rate decode streams Q8_0 weights at on `kernels`' threads, bytes a second per call: a
 * 512 MiB working set (far beyond any cache) of 16 MiB matrices of 2048 columns, uploaded
 * once (they stay until the kernels close), each sample as many passes over all of them as fit
 * in STREAM_SAMPLE_MS (as probeStream, speed.ts).
 */
export function openStreamSampler(kernels: Kernels): () => number {
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
  const bytes = matrices * rows * rowBytes(GgmlType.Q8_0, cols);
  pass();
  return () => bytes / secondsPerCall(pass, STREAM_SAMPLE_MS, 0);
}

/**
 * `count` separate stream samples (openStreamSampler) on `threads`. A VM that flips between a
 * fast and a slow mode shows both in the samples, where one long probe would average them.
 * With `prefill`, each stream sample is followed by one of the prefill probe and one of the
 * decode probe at that shape, so the three pair up by the mode they saw.
 */
async function sampleRates(threads: number, count: number, prefill?: PrefillShape): Promise<Samples> {
  const kernels = await createKernels({ threads });
  try {
    const stream = openStreamSampler(kernels);
    const probe = prefill ? await openPrefillProbe(kernels, prefill) : undefined;
    const decode = prefill ? await openDecodeProbe(kernels, prefill) : undefined;
    const out: Samples = { stream: [], prefill: [], decode: [] };
    for (let i = 0; i < count; i++) {
      out.stream.push(stream());
      if (probe) out.prefill.push(await probe.sample());
      if (decode) out.decode.push(await decode.sample());
    }
    return out;
  } finally {
    await kernels.close();
  }
}

/** Pairs of the prefill probe at 1 thread and at `threads`, alternated: the second's speedup. */
const SCALING_PAIRS = 3;

/**
 * How much faster the prefill probe runs on `threads` than on 1, the median of SCALING_PAIRS
 * pairs taken back to back (so both halves of a pair see the same minutes): below `threads`
 * by what the calls' hand-offs to worker threads and the work left on one thread cost.
 */
export async function prefillThreadScaling(threads: number, shape: PrefillShape): Promise<number> {
  const one = await createKernels({ threads: 1 });
  const many = await createKernels({ threads });
  try {
    const probes = [await openPrefillProbe(one, shape), await openPrefillProbe(many, shape)] as const;
    const layerMs = (x: PrefillSample): number => x.gemmMs + x.attentionMs + x.otherMs;
    const ratios: number[] = [];
    for (let i = 0; i < SCALING_PAIRS; i++)
      ratios.push(layerMs(await probes[0].sample()) / layerMs(await probes[1].sample()));
    return median(ratios);
  } finally {
    await Promise.all([one.close(), many.close()]);
  }
}

/** `count` samples of the decode stream rate on `threads` (bytes a second each; see sampleRates). */
export async function streamSamples(threads: number, count = STREAM_SAMPLES): Promise<number[]> {
  return (await sampleRates(threads, count)).stream;
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
 * The prefill terms from the probe's samples, each paired with a stream sample: the GEMMs'
 * and attention's FLOP/s and the rest per layer per token (medians), and the GEMMs' FLOP/s per
 * stream byte (the median of each pair's ratio: compute per stream byte within one mode).
 */
function prefillTerms(
  samples: Samples,
  shape: PrefillShape,
): Pick<
  Calibration,
  | 'prefillFlopsPerS'
  | 'prefillFlopsPerStreamByte'
  | 'prefillAttentionFlopsPerS'
  | 'prefillLayerTokenMs'
  | 'prefillShape'
> {
  const rates = samples.prefill.map((x) => prefillRates(x, shape));
  return {
    prefillFlopsPerS: median(rates.map((r) => r.gemmFlopsPerS)),
    prefillFlopsPerStreamByte: median(rates.map((r, i) => r.gemmFlopsPerS / samples.stream[i]!)),
    prefillAttentionFlopsPerS: median(rates.map((r) => r.attentionFlopsPerS)),
    prefillLayerTokenMs: median(rates.map((r) => r.layerTokenMs)),
    prefillShape: shape,
  };
}

/**
 * The decode terms from the decode probe's samples, each paired with a stream sample: the
 * layers' weights' rate at the model's shapes over the stream probe's (the median of each
 * pair's ratio, so the share holds in either mode of the VM), the rest of a layer (attention,
 * norms, RoPE, the KV store, the JS between calls; the median), and the kernel calls a layer
 * makes.
 */
function decodeTerms(
  samples: Samples,
  shape: PrefillShape,
): Pick<Calibration, 'decodeLayerShare' | 'layerOverheadMs' | 'decodeCallsPerLayer'> {
  const rates = samples.decode.map((x) => decodeRates(x, shape));
  return {
    decodeLayerShare: median(rates.map((r, i) => r.layerBytesPerS / samples.stream[i]!)),
    layerOverheadMs: median(rates.map((r) => r.layerOverheadMs)),
    decodeCallsPerLayer: median(samples.decode.map((x) => x.callsPerLayer)),
  };
}

/**
 * Measures what `tandem plan` needs of this machine with tandem's own kernels on `threads`:
 * the rate decode streams Q8_0 weights from memory (STREAM_SAMPLES samples: the median and
 * the range), the prefill's terms at `prefill` (a model's layer shape and prompt; default
 * TinyLlama's at 128 tokens) from the probe sampled after each stream sample, the decode
 * layer's terms at the same shapes (calibrate-decode.ts, likewise sampled), on more than one
 * thread the prefill probe's speedup over one thread, what a decode step costs beyond its
 * layers (the narrow twin's intercept, calibrate-twin.ts), and a sleeping thread's wake-up.
 */
export async function calibrate(o: {
  threads: number;
  prefill?: PrefillShape;
  log?: (line: string) => void;
}): Promise<Calibration> {
  const log = o.log ?? (() => {});
  // a shape whose rows would not fill whole Q8_0 blocks is probed at TinyLlama's
  const shape = o.prefill && probeable(o.prefill) ? o.prefill : DEFAULT_PREFILL_SHAPE;
  log(
    `calibrating on ${o.threads} thread(s): memory stream, the prefill and the decode probes (${STREAM_SAMPLES} samples each)...`,
  );
  const samples = await sampleRates(o.threads, STREAM_SAMPLES, shape);
  const prefill = prefillTerms(samples, shape);
  let scaling: { prefillThreadScaling?: number } = {};
  if (o.threads > 1) {
    log(`the prefill probe at 1 and ${o.threads} threads, alternated...`);
    scaling = { prefillThreadScaling: await prefillThreadScaling(o.threads, shape) };
  }
  const kernels = await createKernels({ threads: o.threads });
  try {
    log("a decode step's fixed cost (the narrow twin at two depths)...");
    const fixed = await measureFixedCosts(kernels, { bytesPerS: median(samples.stream) });
    log('waking a sleeping thread...');
    const wakeMs = await measureWakeMs();
    return withStreamSamples(
      {
        date: new Date().toISOString(),
        threads: o.threads,
        memoryBytes: totalmem(),
        cpuCores: availableParallelism(),
        decodeBytesPerS: median(samples.stream),
        ...prefill,
        ...scaling,
        ...fixed,
        // a layer's cost beyond its weights, measured at the model's own width (the twin's is at 32)
        ...decodeTerms(samples, shape),
        wakeMs,
      },
      samples.stream,
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
