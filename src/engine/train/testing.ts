import type { ModelShape } from '../format/model-plan.js';
import { Rng } from '../sampling/rng.js';
import type { RunSettings } from './checkpoint.js';
import { hashTokens } from './data.js';
import { paramLayout, type ParamLayout } from './params.js';

/** A llama small enough for finite differences and PyTorch in a test: every feature (GQA, 2 layers) kept. */
export const MICRO_SHAPE: ModelShape = {
  layers: 2,
  embd: 16,
  ff: 24,
  heads: 4,
  kvHeads: 2,
  headDim: 4,
  vocab: 32,
  context: 16,
  experts: 0,
  expertsUsed: 0,
  expertFf: 0,
  sharedFf: 0,
};

/**
 * Weights with gradients well above f32 noise for finite differences: matrices uniform in
 * +-0.3 (training's 0.02 gives gradients too small to difference in f32), norms 1 +- 0.2.
 */
export function testWeights(shape: ModelShape, seed: number): { layout: ParamLayout; weights: Float32Array } {
  const layout = paramLayout(shape);
  const weights = new Float32Array(layout.total);
  const rng = new Rng(seed);
  for (const e of layout.entries) {
    for (let i = e.offset; i < e.offset + e.size; i++)
      weights[i] = e.decay ? (rng.next() * 2 - 1) * 0.3 : 1 + (rng.next() * 2 - 1) * 0.2;
  }
  return { layout, weights };
}

/** rows x (seq + 1) token ids below vocab. */
export function testBatch(rows: number, seq: number, vocab: number, seed: number): Int32Array {
  const rng = new Rng(seed);
  return Int32Array.from({ length: rows * (seq + 1) }, () => Math.floor(rng.next() * vocab));
}

/** A token stream the micro model learns from in the data-parallel tests: 500 ids below its vocabulary. */
export const MICRO_TOKENS = Int32Array.from({ length: 500 }, (_, i) => (i * 5 + (i >> 3)) % 31);

/** A 5-step run of MICRO_SHAPE on MICRO_TOKENS, batch 3 x 10; `clip` the gradient norm's bound (0: none). */
export function microRunSettings(clip: number): RunSettings {
  return {
    shapeName: 'micro-test',
    shape: MICRO_SHAPE,
    seed: 4,
    steps: 5,
    batch: 3,
    seq: 10,
    lr: 1e-2,
    warmup: 2,
    minLrRatio: 0.1,
    weightDecay: 0.1,
    clip,
    dataTokens: MICRO_TOKENS.length,
    dataHash: hashTokens(MICRO_TOKENS),
  };
}
