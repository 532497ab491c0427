// Training of the llama architecture on one node (the parallel layer adds data-parallel ranks).
export {
  AdamW,
  ADAMW_DEFAULTS,
  clipGradNorm,
  learningRate,
  type AdamWOptions,
  type Schedule,
} from './adamw.js';
export {
  loadCheckpoint,
  saveCheckpoint,
  type Checkpoint,
  type CurvePoint,
  type RunSettings,
} from './checkpoint.js';
export { curveCsv, writeTextAtomically } from './curve.js';
export { batchAt, hashTokens, tokenizeFile } from './data.js';
export { LlamaGrad, LLAMA_EPS, LLAMA_ROPE_BASE, type GradReady } from './llama-grad.js';
export {
  initParams,
  paramLayout,
  views,
  type FlatRange,
  type ParamEntry,
  type ParamLayout,
} from './params.js';
export { trainShape, trainShapes } from './shapes.js';
export { trainingPlan, trainingTokenizer, writeTrainedGguf, type TrainedModelInfo } from './to-gguf.js';
export {
  train,
  type EmbeddingRows,
  type OptimizerShard,
  type GradSync,
  type StepLog,
  type TrainConfig,
  type TrainResult,
} from './trainer.js';
