import { quantize } from '../../kernels/quant/index.js';
import { writeGguf } from './gguf-writer.js';
import { llama3RopeFactors, modelShapes, planModel, type FileTypeName, type ModelArch, type ModelPlan, type ModelShape, type PlannedTensor } from './model-plan.js';
import { TandemError } from '../../errors/index.js';

/** FNV-1a of a tensor name, so each tensor's values depend only on (seed, name). */
function hashName(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** xoshiro128** seeded through splitmix32: fast, deterministic, good enough for weights. */
export class Rng {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;
  private spare = 0;
  private hasSpare = false;

  constructor(seed: number) {
    let x = seed >>> 0;
    const next = (): number => {
      x = (x + 0x9e3779b9) >>> 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.s0 = next();
    this.s1 = next();
    this.s2 = next();
    this.s3 = next();
  }

  /** Uniform in (0, 1). */
  uniform(): number {
    const result = Math.imul(((Math.imul(this.s1, 5) << 7) | (Math.imul(this.s1, 5) >>> 25)) >>> 0, 9) >>> 0;
    const t = this.s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = (this.s3 << 11) | (this.s3 >>> 21);
    return (result + 0.5) / 4294967296;
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

/** A stream of one tensor's f32 values, row chunk by row chunk. */
export class TensorValues {
  private readonly rng: Rng;
  constructor(
    readonly tensor: PlannedTensor,
    seed: number,
    private readonly std: number,
  ) {
    this.rng = new Rng((seed ^ hashName(tensor.name)) >>> 0);
  }
  fill(out: Float32Array): Float32Array {
    if (this.tensor.init === 'rope-llama3') out.set(llama3RopeFactors(out.length * 2));
    else if (this.tensor.init === 'norm') this.rng.fillNormal(out, 1, 0.1);
    else this.rng.fillNormal(out, 0, this.std);
    return out;
  }
}

/** Every value of a planned tensor at once (tests; make-model itself streams). */
export function tensorF32(tensor: PlannedTensor, seed: number, std = 0.02): Float32Array {
  return new TensorValues(tensor, seed, std).fill(new Float32Array(tensor.dims.reduce((a, b) => a * b, 1)));
}

export interface MakeModelOptions {
  arch: ModelArch;
  shape: string | ModelShape;
  type: FileTypeName;
  seed?: number;
  vocab?: 'spm' | 'bpe';
  tied?: boolean;
  ropeScaling?: 'none' | 'llama3';
  /** Standard deviation of weights and biases (default 0.02). */
  std?: number;
  onProgress?: (written: number, total: number, tensor: string) => void;
}

export function resolveShape(shape: string | ModelShape): ModelShape {
  if (typeof shape !== 'string') return shape;
  const s = modelShapes[shape];
  if (s === undefined) {
    throw new TandemError('MODEL_FORMAT_UNSUPPORTED', `unknown model shape '${shape}'`, { hint: `use one of ${Object.keys(modelShapes).join(', ')}` });
  }
  return s;
}

export function planFor(o: MakeModelOptions): ModelPlan {
  return planModel({
    arch: o.arch,
    shape: resolveShape(o.shape),
    type: o.type,
    vocab: o.vocab ?? (o.arch.startsWith('qwen') ? 'bpe' : 'spm'),
    tied: o.tied ?? false,
    seed: o.seed ?? 0,
    ropeScaling: o.ropeScaling ?? 'none',
  });
}

/** Elements generated and quantized per chunk: bounds memory whatever the model size. */
const CHUNK_ELEMENTS = 1 << 20;

/**
 * Writes a GGUF model with random weights (seeded, N(0, std)) and a real layout. Streams:
 * memory stays at a few MiB of f32 per chunk, whatever the model's size.
 */
export async function makeModel(path: string, o: MakeModelOptions): Promise<{ plan: ModelPlan; bytes: number }> {
  const plan = planFor(o);
  const seed = o.seed ?? 0;
  const std = o.std ?? 0.02;
  const byName = new Map(plan.tensors.map((t) => [t.name, t]));
  const { bytes } = await writeGguf(
    path,
    plan.metadata,
    plan.tensors,
    function* (layout) {
      const tensor = byName.get(layout.name) as PlannedTensor;
      const values = new TensorValues(tensor, seed, std);
      const row = tensor.dims[0] as number;
      const rows = tensor.dims.slice(1).reduce((a, b) => a * b, 1);
      const step = Math.max(1, Math.floor(CHUNK_ELEMENTS / row));
      const buf = new Float32Array(step * row);
      for (let r = 0; r < rows; r += step) {
        const n = Math.min(step, rows - r) * row;
        yield quantize(tensor.type, values.fill(buf.subarray(0, n)));
      }
    },
    o.onProgress ? { onProgress: o.onProgress } : {},
  );
  return { plan, bytes };
}
