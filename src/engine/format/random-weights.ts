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
 * A skewed MoE routes by the residual's first `tensor.routing` coordinates, which only the
 * embedding writes and only the routers read: every other matrix that reads the residual has
 * those inputs zeroed, every one that writes it has those outputs zeroed, and the residual
 * norms weigh them by exactly 1. Coordinate 0 is the same for every token (ROUTING_CONSTANT x
 * std); coordinates 1.. are the token's own random embedding values. A router row's value at
 * 0 is its expert's bias and its values at 1.. the random part, so a token's router logits
 * are (bias + its random part) / the token's RMS over the whole residual: whatever the layers
 * write elsewhere only scales a token's logits together, which leaves its top-k as it is, so
 * every layer routes as the first does.
 */
const ROUTING_CONSTANT = 1;

function setChannel(values: Float32Array, width: number, job: ChunkJob): void {
  for (let i = 0; i < values.length; i += width) values[i] = ROUTING_CONSTANT * job.std;
}

/**
 * Zeroes the routing inputs of every row ('in'); or every row that is a routing output ('out';
 * experts stack [out, experts]); or sets a residual norm's routing weights to 1 ('unit').
 */
function isolateChannel(values: Float32Array, width: number, firstRow: number, tensor: PlannedTensor): void {
  const r = tensor.routing ?? 1;
  if (tensor.isolate === 'unit') values.fill(1, 0, r);
  else if (tensor.isolate === 'in') for (let i = 0; i < values.length; i += width) values.fill(0, i, i + r);
  else if (tensor.isolate === 'out') {
    const outs = tensor.dims[1] as number;
    for (let row = 0; row * width < values.length; row++)
      if ((firstRow + row) % outs < r) values.fill(0, row * width, (row + 1) * width);
  }
}

/**
 * Router rows of a skewed MoE (all in one chunk: a router has few rows). The random part
 * reads coordinates [1, routing) only, the rows there made orthogonal (as far as there are
 * coordinates) and of one length L, so that over tokens, whose embedding values there are
 * N(0, std), the experts' random parts are independent with spread std x L. Coordinate 0 is
 * then offsets[e] x L x std over the coordinate's value: expert e's logit is offsets[e] +
 * N(0, 1) in units of that spread, the model zipfLogitOffsets calibrated.
 */
function skewRouterRows(values: Float32Array, width: number, firstRow: number, job: ChunkJob): void {
  const offsets = job.tensor.offsets ?? [];
  const r = job.tensor.routing ?? 2;
  const rows = values.length / width;
  const length = job.std * Math.sqrt(r - 1);
  const row = (k: number): Float32Array => values.subarray(k * width + 1, k * width + r);
  for (let k = 0; k < rows; k++) {
    values.fill(0, k * width + r, (k + 1) * width);
    const v = row(k);
    // Gram-Schmidt against the rows before (while they leave room), then to length L
    for (let j = 0; j < Math.min(k, r - 2); j++) {
      const u = row(j);
      let dot = 0;
      for (let i = 0; i < v.length; i++) dot += v[i]! * u[i]!;
      const scale = dot / (length * length);
      for (let i = 0; i < v.length; i++) v[i]! -= scale * u[i]!;
    }
    let norm = 0;
    for (let i = 0; i < v.length; i++) norm += v[i]! * v[i]!;
    const to = length / Math.sqrt(norm);
    for (let i = 0; i < v.length; i++) v[i]! *= to;
    values[k * width] = ((offsets[firstRow + k] ?? 0) * length) / ROUTING_CONSTANT;
  }
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
