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
  return values;
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
