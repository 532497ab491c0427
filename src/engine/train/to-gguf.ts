import { gv, writeGguf } from '../format/gguf-writer.js';
import { planFor } from '../format/make-model.js';
import type { FileTypeName } from '../format/model-plan.js';
import { Tokenizer, tokenizerMetadataFromGguf } from '../tokenizer/index.js';
import { quantize } from '../../kernels/quant/quantize.js';
import { views, type ParamLayout } from './params.js';

/**
 * The file a trained model goes into: make-model's llama layout and metadata for the shape
 * (RMSNorm eps 1e-5, RoPE base 10000 on adjacent pairs: what LlamaGrad computes) with its
 * SentencePiece-style vocabulary, which is also the tokenizer training reads the data with.
 */
export function trainingPlan(layout: ParamLayout, type: FileTypeName = 'f32') {
  return planFor({ arch: 'llama', shape: layout.shape, type });
}

/** The tokenizer of the shape's vocabulary (the one the written GGUF carries). */
export function trainingTokenizer(layout: ParamLayout): Tokenizer {
  return new Tokenizer(tokenizerMetadataFromGguf(trainingPlan(layout).metadata));
}

export interface TrainedModelInfo {
  steps: number;
  finalLoss: number;
  seed: number;
  data: string;
}

/** Writes the weights as a GGUF (atomically), each tensor converted to the file type's. */
export async function writeTrainedGguf(
  path: string,
  layout: ParamLayout,
  weights: Float32Array,
  info: TrainedModelInfo,
  type: FileTypeName = 'f32',
): Promise<{ bytes: number }> {
  const plan = trainingPlan(layout, type);
  plan.metadata.set('general.name', gv.str('tandem trained llama'));
  plan.metadata.set(
    'general.description',
    gv.str(
      `trained by tandem train on ${info.data} (seed ${info.seed}, ${info.steps} steps, final training loss ${info.finalLoss.toFixed(3)} nats/token)`,
    ),
  );
  const w = views(layout, weights);
  return writeGguf(path, plan.metadata, plan.tensors, (t) => {
    const values = w.get(t.name);
    if (values === undefined) throw new Error(`writeTrainedGguf: no trained tensor ${t.name}`);
    return quantize(t.type, values);
  });
}
