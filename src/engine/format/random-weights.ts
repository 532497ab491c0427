import { quantize } from '../../kernels/quant/index.js';
import { Rng as XoshiroRng } from '../sampling/rng.js';
import { llama3RopeFactors, type PlannedTensor } from './model-plan.js';

/** FNV-1a of a tensor name: each chunk's values depend only on (seed, name, chunk). */
function hashName(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** The sampler's xoshiro128** generator, plus the uniform and normal draws that weights need. */
export class Rng extends XoshiroRng {
  private spare = 0;
  private hasSpare = false;

  /** Uniform in (0, 1). */
  uniform(): number {
    return (this.nextU32() + 0.5) / 4294967296;
  }

  /** Fills `out` with mean + std * N(0, 1) (Marsaglia's polar method; both values of a pair used). */
  fillNormal(out: Float32Array, mean: number, std: number): void {
    let i = 0;
    if (this.hasSpare && out.length > 0) {
      out[i++] = mean + std * this.spare;
      this.hasSpare = false;
    }
    while (i < out.length) {
      let u: number;
      let v: number;
      let s: number;
      do {
        u = 2 * this.uniform() - 1;
        v = 2 * this.uniform() - 1;
        s = u * u + v * v;
      } while (s >= 1 || s === 0);
      const f = Math.sqrt((-2 * Math.log(s)) / s);
      out[i++] = mean + std * u * f;
      if (i < out.length) out[i++] = mean + std * v * f;
      else {
        this.spare = v * f;
        this.hasSpare = true;
      }
    }
  }
}

/** Values generated (and quantized) per chunk: bounds memory whatever the model size. */
export const CHUNK_ELEMENTS = 1 << 20;

/** Rows per chunk: whole rows, about CHUNK_ELEMENTS values. */
export function chunkRows(tensor: PlannedTensor): number {
  return Math.max(1, Math.floor(CHUNK_ELEMENTS / (tensor.dims[0] as number)));
}

export function tensorRows(tensor: PlannedTensor): number {
  return tensor.dims.slice(1).reduce((a, b) => a * b, 1);
}

export function chunkCount(tensor: PlannedTensor): number {
  return Math.ceil(tensorRows(tensor) / chunkRows(tensor));
}

export interface ChunkJob {
  tensor: PlannedTensor;
  seed: number;
  std: number;
  chunk: number;
}

/**
 * The f32 values of one chunk. Each chunk has its own generator seeded from (seed, tensor
 * name, chunk index), so chunks can be made in any order, on any thread, with the same result.
 */
export function chunkValues(job: ChunkJob, out?: Float32Array): Float32Array {
  const { tensor, chunk } = job;
  const row = tensor.dims[0] as number;
  const per = chunkRows(tensor);
  const rows = Math.min(per, tensorRows(tensor) - chunk * per);
  const values = out ? out.subarray(0, rows * row) : new Float32Array(rows * row);
  if (tensor.init === 'rope-llama3') {
    values.set(llama3RopeFactors(row * 2));
    return values;
  }
  const rng = new Rng((job.seed ^ hashName(tensor.name) ^ Math.imul(chunk + 1, 0x9e3779b1)) >>> 0);
  if (tensor.init === 'norm') rng.fillNormal(values, 1, 0.1);
  else rng.fillNormal(values, 0, job.std);
  if (tensor.init === 'embedding-skew') setChannel(values, row, job);
  if (tensor.init === 'router-skew') skewRouterRows(values, row, chunk * per, job);
  if (tensor.isolate) isolateChannel(values, row, chunk * per, tensor);
  return values;
}

/**
 * A skewed MoE routes by residual coordinate 0, which only the embedding writes (every token
 * gets SKEW_CHANNEL x std x sqrt(width) there) and only the routers read: every other matrix
 * that reads the residual has input 0 zeroed, every one that writes it has output 0 zeroed.
 * After RMSNorm the coordinate is about KAPPA x sqrt(width) for every token, and a router
 * row's value there is its expert's bias; the rest of the residual is the random model's.
 */
const SKEW_CHANNEL = 0.5;
/**
 * What writes the residual is drawn this much smaller, so each token's residual stays mostly
 * its embedding: the layers' outputs share components across tokens (a running mean of
 * attention's values, the hot experts' outputs) that would bias routing at random.
 */
const WRITER_SCALE = 0.1;
const KAPPA = SKEW_CHANNEL / Math.sqrt(1 + SKEW_CHANNEL * SKEW_CHANNEL);

function setChannel(values: Float32Array, width: number, job: ChunkJob): void {
  const c = SKEW_CHANNEL * job.std * Math.sqrt(width);
  for (let i = 0; i < values.length; i += width) values[i] = c;
}

/** Zeroes input 0 of every row ('in'), or every row that is output 0 ('out'; experts stack [out, experts]). */
function isolateChannel(values: Float32Array, width: number, firstRow: number, tensor: PlannedTensor): void {
  if (tensor.isolate === 'in') for (let i = 0; i < values.length; i += width) values[i] = 0;
  else if (tensor.isolate === 'out') {
    for (let i = 0; i < values.length; i++) values[i]! *= WRITER_SCALE;
    const outs = tensor.dims[1] as number;
    for (let r = 0; r * width < values.length; r++)
      if ((firstRow + r) % outs === 0) values.fill(0, r * width, (r + 1) * width);
  }
}

/**
 * Router rows of a skewed MoE: the random part reads every coordinate but 0; coordinate 0
 * holds expert e's bias, offsets[e] x the random part's spread over the coordinate's value
 * (std x sqrt(width (1 - KAPPA^2)) over KAPPA x sqrt(width)).
 */
function skewRouterRows(values: Float32Array, width: number, firstRow: number, job: ChunkJob): void {
  const offsets = job.tensor.offsets ?? [];
  const scale = (job.std * Math.sqrt(1 - KAPPA * KAPPA)) / KAPPA;
  for (let r = 0; r * width < values.length; r++) values[r * width] = (offsets[firstRow + r] ?? 0) * scale;
}
/** One chunk generated and quantized to the tensor's type. */
export function chunkBytes(job: ChunkJob, scratch?: Float32Array): Uint8Array {
  return quantize(job.tensor.type, chunkValues(job, scratch));
}

/** Every value of a planned tensor at once (tests; make-model itself streams chunks). */
export function tensorF32(tensor: PlannedTensor, seed: number, std = 0.02): Float32Array {
  const out = new Float32Array(tensor.dims.reduce((a, b) => a * b, 1));
  const step = chunkRows(tensor) * (tensor.dims[0] as number);
  for (let c = 0; c < chunkCount(tensor); c++)
    out.set(chunkValues({ tensor, seed, std, chunk: c }), c * step);
  return out;
}
