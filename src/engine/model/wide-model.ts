import type { ModelShape } from '../format/model-plan.js';

/**
 * For tests that need a real width: one layer of TinyLlama's attention width (2048) and head
 * layout, a shorter FFN and vocabulary so `makeModel` writes it in about a second. At this
 * width the kernels' multi-token paths add many block pairs per row, where a difference in
 * the order of a row's sums shows in the last bits (the `tiny` shape is too narrow for that).
 */
export const wideModelShape: ModelShape = {
  layers: 1,
  embd: 2048,
  ff: 2816,
  heads: 32,
  kvHeads: 4,
  headDim: 64,
  vocab: 2048,
  context: 256,
  experts: 0,
  expertsUsed: 0,
  expertFf: 0,
  sharedFf: 0,
};
