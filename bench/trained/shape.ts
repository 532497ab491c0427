// The shape of the small model that bench/trained/ trains: make-model's llama layout and
// SentencePiece vocabulary, small enough to train on two cores in minutes.
import type { ModelShape } from '../../src/engine/format/model-plan.js';

export const TRAINED_SHAPE: ModelShape = {
  layers: 4,
  embd: 256,
  ff: 768,
  heads: 8,
  kvHeads: 4,
  headDim: 32,
  vocab: 2048,
  context: 512,
  experts: 0,
  expertsUsed: 0,
  expertFf: 0,
  sharedFf: 0,
};
