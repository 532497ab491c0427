// Small generated GGUF models for the distributed tests: real layouts, random weights with a
// large spread (std 0.3) so greedy decoding moves between tokens instead of repeating one.
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { makeModel } from '../../src/engine/format/make-model.js';
import type { ModelArch } from '../../src/engine/format/model-plan.js';
import { generate } from '../../src/engine/generate/generate.js';
import { GgufModelFile } from '../../src/engine/model/gguf-model-file.js';
import { Model } from '../../src/engine/model/model.js';
import { openDevice, type ProviderName } from '../../src/fabric/index.js';
import { createKernels } from '../../src/kernels/index.js';

// 4 layers (pipeline over 3), 4 query / 2 KV heads (KV split on 2, replicated on 3 and 4),
// 4 experts (expert parallel over 2 and 4).
const shape = {
  layers: 4,
  embd: 128,
  ff: 256,
  heads: 4,
  kvHeads: 2,
  headDim: 32,
  vocab: 512,
  context: 128,
  experts: 4,
  expertsUsed: 2,
  expertFf: 128,
  sharedFf: 128,
};

export const PROMPT = [1, 20, 31, 42, 53, 64, 75, 86, 97, 108];

/**
 * A tiny qwen3moe whose routing is skewed toward a few experts (make-model --router-skew), so
 * the members' counters give a placement worth switching to; with SKEWED_PROMPT.
 */
export const SKEWED_MOE = {
  arch: 'qwen3moe',
  shape: 'tiny',
  type: 'q8_0',
  seed: 5,
  experts: 8,
  expertsUsed: 2,
  routerSkew: { kind: 'zipf', s: 1.5 },
} as const;
export const SKEWED_PROMPT = Array.from({ length: 24 }, (_, i) => 3 + ((i * 37) % 200));
export const STEPS = 6;

export interface TestModel {
  arch: ModelArch;
  path: string;
  /** Greedy tokens of a single-node run (same kernels, one thread). */
  expected: number[];
}

export async function singleNodeTokens(
  path: string,
  steps = STEPS,
  prompt: readonly number[] = PROMPT,
): Promise<number[]> {
  const kernels = await createKernels({ threads: 1 });
  const file = GgufModelFile.open(path);
  try {
    const model = await Model.load(file, kernels);
    return (
      await generate(model, model.newSession({ contextLength: 128 }), [...prompt], { maxTokens: steps })
    ).tokens;
  } finally {
    file.close();
    await kernels.close();
  }
}

export type TestModelKey = 'llama' | 'qwen2' | 'moe' | 'moeShared';

/** One of the small models in `dir` (the file only; its single-node tokens are not computed). */
export async function makeTestModelFile(
  dir: string,
  key: string,
  arch: ModelArch,
  type: 'f32' | 'q8_0',
): Promise<string> {
  const path = join(dir, `${key}.gguf`);
  await makeModel(path, { arch, shape, type, std: 0.3, seed: 5 });
  return path;
}

/**
 * llama (f32), qwen2 (q8_0), qwen3moe (f32) and qwen2moe (f32, with a shared expert) models
 * in `dir`, with their single-node tokens.
 */
export async function makeTestModels(dir: string): Promise<Record<TestModelKey, TestModel>> {
  const out: Partial<Record<TestModelKey, TestModel>> = {};
  for (const [key, arch, type] of [
    ['llama', 'llama', 'f32'],
    ['qwen2', 'qwen2', 'q8_0'],
    ['moe', 'qwen3moe', 'f32'],
    ['moeShared', 'qwen2moe', 'f32'],
  ] as const) {
    const path = await makeTestModelFile(dir, key, arch, type);
    out[key] = { arch, path, expected: await singleNodeTokens(path) };
  }
  return out as Record<TestModelKey, TestModel>;
}

/**
 * A wider llama (f32, about 35 MiB) for memory pooling: large enough that half of it plus a
 * node's communication buffers (4.3 MiB on 2 tcp nodes) stays well under the whole.
 */
export async function makePoolingModel(dir: string): Promise<TestModel> {
  const path = join(dir, 'pooling.gguf');
  await makeModel(path, {
    arch: 'llama',
    shape: { ...shape, embd: 256, ff: 2048, heads: 8, vocab: 4096 },
    type: 'f32',
    std: 0.3,
    seed: 5,
  });
  return { arch: 'llama', path, expected: await singleNodeTokens(path) };
}

/**
 * A deeper, wider Q8_0 llama (8 layers of width 256, 8 heads, FFN 768; about 7 MiB) whose
 * greedy tokens part from one node's within 40 steps under tensor parallel on 2 and 4 nodes
 * when the ranks add their partial sums in any order but one node's (measured: at step 22).
 */
export async function makeExactnessModel(dir: string): Promise<string> {
  const path = join(dir, 'exact.gguf');
  await makeModel(path, {
    arch: 'llama',
    shape: {
      ...shape,
      layers: 8,
      embd: 256,
      ff: 768,
      heads: 8,
      kvHeads: 4,
      headDim: 32,
      vocab: 2048,
      context: 256,
      experts: 0,
      expertsUsed: 0,
      expertFf: 0,
      sharedFf: 0,
    },
    type: 'q8_0',
    std: 0.3,
    seed: 5,
  });
  return path;
}

/** The fabric providers this checkout has (shm arrives after tcp). */
export async function availableProviders(): Promise<ProviderName[]> {
  const out: ProviderName[] = [];
  for (const p of ['shm', 'tcp'] as const) {
    try {
      const d = await openDevice(p);
      await d.close();
      out.push(p);
    } catch {
      // provider not built yet
    }
  }
  return out;
}

export const cores = availableParallelism();
