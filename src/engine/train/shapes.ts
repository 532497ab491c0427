import { TandemError } from '../../errors/index.js';
import { modelShapes, type ModelShape } from '../format/model-plan.js';

const dense = { experts: 0, expertsUsed: 0, expertFf: 0, sharedFf: 0 };

/**
 * Shapes `tandem train --model-shape` takes: make-model's tiny and small (llama, untied
 * output), the shape of the shipped model (models/README.md, bench/trained/shape.ts), and
 * micro, small enough to train in a test in seconds (vocabulary 512, make-model's floor).
 */
export const trainShapes: Readonly<Record<string, ModelShape>> = {
  micro: {
    layers: 2,
    embd: 64,
    ff: 128,
    heads: 4,
    kvHeads: 2,
    headDim: 16,
    vocab: 512,
    context: 128,
    ...dense,
  },
  tiny: { ...(modelShapes.tiny as ModelShape), ...dense },
  small: { ...(modelShapes.small as ModelShape), ...dense },
  shipped: {
    layers: 4,
    embd: 256,
    ff: 768,
    heads: 8,
    kvHeads: 4,
    headDim: 32,
    vocab: 2048,
    context: 512,
    ...dense,
  },
};

export function trainShape(name: string): ModelShape {
  const s = trainShapes[name];
  if (s === undefined)
    throw new TandemError('TRAIN_OPTIONS', `unknown model shape '${name}'`, {
      hint: `use one of ${Object.keys(trainShapes).join(', ')}`,
    });
  return s;
}
