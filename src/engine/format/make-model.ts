import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import type { RouterSkew } from './router-skew.js';
import { TandemError } from '../../errors/index.js';
import { writeGguf } from './gguf-writer.js';
import {
  modelShapes,
  planModel,
  type FileTypeName,
  type ModelArch,
  type ModelPlan,
  type ModelShape,
  type PlannedTensor,
} from './model-plan.js';
import { CHUNK_ELEMENTS, chunkBytes, chunkCount, type ChunkJob } from './random-weights.js';

export { Rng, tensorF32 } from './random-weights.js';

export interface MakeModelOptions {
  arch: ModelArch;
  shape: string | ModelShape;
  type: FileTypeName;
  seed?: number;
  vocab?: 'spm' | 'bpe';
  tied?: boolean;
  ropeScaling?: 'none' | 'llama3';
  /** Worker threads generating and quantizing (default 1: in this thread). */
  threads?: number;
  /** Standard deviation of weights and biases (default 0.02). */
  std?: number;
  /** MoE: routed experts and experts per token, replacing the shape's. */
  experts?: number;
  expertsUsed?: number;
  /** MoE: routing that follows Zipf(s) (router-skew.ts). */
  routerSkew?: RouterSkew;
  onProgress?: (written: number, total: number, tensor: string) => void;
}

export function resolveShape(shape: string | ModelShape): ModelShape {
  if (typeof shape !== 'string') return shape;
  const s = modelShapes[shape];
  if (s === undefined) {
    throw new TandemError('MODEL_FORMAT_UNSUPPORTED', `unknown model shape '${shape}'`, {
      hint: `use one of ${Object.keys(modelShapes).join(', ')}`,
    });
  }
  return s;
}

export function planFor(o: MakeModelOptions): ModelPlan {
  const base = resolveShape(o.shape);
  const shape = {
    ...base,
    ...(o.experts !== undefined ? { experts: o.experts } : {}),
    ...(o.expertsUsed !== undefined ? { expertsUsed: o.expertsUsed } : {}),
  };
  if (
    (o.experts !== undefined || o.expertsUsed !== undefined) &&
    (shape.expertsUsed < 1 || shape.expertsUsed > shape.experts)
  )
    throw new TandemError(
      'CLI_USAGE',
      `make-model: ${shape.expertsUsed} experts per token of ${shape.experts}`,
      {
        hint: 'give 1 <= --experts-used <= --experts',
      },
    );
  return planModel({
    arch: o.arch,
    shape,
    ...(o.routerSkew ? { routerSkew: o.routerSkew } : {}),
    type: o.type,
    vocab: o.vocab ?? (o.arch.startsWith('qwen') ? 'bpe' : 'spm'),
    tied: o.tied ?? false,
    seed: o.seed ?? 0,
    ropeScaling: o.ropeScaling ?? 'none',
  });
}

/**
 * Worker threads that generate and quantize chunks (make-model-worker.js). Chunks are
 * independent, so the file is the same whatever the number of threads.
 */
class ChunkPool {
  private readonly workers: Worker[] = [];
  private readonly idle: Worker[] = [];
  private readonly queue: {
    job: ChunkJob;
    resolve: (b: Uint8Array) => void;
    reject: (e: unknown) => void;
  }[] = [];
  private readonly pending = new Map<
    Worker,
    { resolve: (b: Uint8Array) => void; reject: (e: unknown) => void }
  >();
  private failed: unknown;

  constructor(threads: number) {
    for (let i = 0; i < threads; i++) {
      const w = new Worker(new URL('./make-model-worker.js', import.meta.url));
      w.on('message', (bytes: Uint8Array) => {
        const p = this.pending.get(w);
        this.pending.delete(w);
        this.idle.push(w);
        p?.resolve(bytes);
        this.pump();
      });
      w.on('error', (error) => this.fail(error));
      this.workers.push(w);
      this.idle.push(w);
    }
  }

  private fail(error: unknown): void {
    this.failed = error;
    for (const p of this.pending.values()) p.reject(error);
    this.pending.clear();
    for (const q of this.queue.splice(0)) q.reject(error);
  }

  private pump(): void {
    while (this.idle.length && this.queue.length) {
      const w = this.idle.pop() as Worker;
      const { job, resolve, reject } = this.queue.shift()!;
      this.pending.set(w, { resolve, reject });
      w.postMessage(job);
    }
  }

  run(job: ChunkJob): Promise<Uint8Array> {
    if (this.failed !== undefined) return Promise.reject(this.failed);
    return new Promise((resolve, reject) => {
      this.queue.push({ job, resolve, reject });
      this.pump();
    });
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}

/** A tensor's chunks in order, `ahead` of them in flight on the pool. */
async function* pooledChunks(
  pool: ChunkPool,
  tensor: PlannedTensor,
  seed: number,
  std: number,
  ahead: number,
): AsyncGenerator<Uint8Array> {
  const n = chunkCount(tensor);
  const inflight: Promise<Uint8Array>[] = [];
  let next = 0;
  while (next < n || inflight.length) {
    while (next < n && inflight.length < ahead) inflight.push(pool.run({ tensor, seed, std, chunk: next++ }));
    yield await (inflight.shift() as Promise<Uint8Array>);
  }
}

function* localChunks(tensor: PlannedTensor, seed: number, std: number): Generator<Uint8Array> {
  const scratch = new Float32Array(
    Math.min(
      CHUNK_ELEMENTS,
      tensor.dims.reduce((a, b) => a * b, 1),
    ) + (tensor.dims[0] as number),
  );
  for (let c = 0; c < chunkCount(tensor); c++) yield chunkBytes({ tensor, seed, std, chunk: c }, scratch);
}

/**
 * Writes a GGUF model with random weights (seeded, N(0, std)) and a real layout. Streams
 * chunk by chunk, so memory stays at a few MiB per thread whatever the model's size;
 * with `threads` > 1 worker threads generate and quantize the chunks.
 */
export async function makeModel(
  path: string,
  o: MakeModelOptions,
): Promise<{ plan: ModelPlan; bytes: number }> {
  const plan = planFor(o);
  const seed = o.seed ?? 0;
  const std = o.std ?? 0.02;
  const threads = Math.max(1, Math.min(o.threads ?? 1, availableParallelism() * 2, 64));
  const pool = threads > 1 ? new ChunkPool(threads) : undefined;
  const byName = new Map(plan.tensors.map((t) => [t.name, t]));
  try {
    const { bytes } = await writeGguf(
      path,
      plan.metadata,
      plan.tensors,
      (layout) => {
        const tensor = byName.get(layout.name) as PlannedTensor;
        return pool ? pooledChunks(pool, tensor, seed, std, threads * 2) : localChunks(tensor, seed, std);
      },
      o.onProgress ? { onProgress: o.onProgress } : {},
    );
    return { plan, bytes };
  } finally {
    await pool?.close();
  }
}
