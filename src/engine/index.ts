// The engine's public surface: single-node inference on one model or one shard of it.
export { Model, type LoadOptions, type SessionOptions } from './model/model.js';
export { ExpertLoad } from './model/expert-load.js';
export {
  MAX_PREFILL_PIECE,
  MIXED_PREFILL_CHUNK,
  PREFILL_CHUNK,
  mixedPrefillChunk,
  prefillPiece,
} from './model/prefill.js';
export { openModel, type OpenModelOptions, type OpenedModel } from './model/open-model.js';
export {
  configFromMetadata,
  modelArchs,
  type ModelArch,
  type ModelConfig,
  type RopeStyle,
  type MetadataLookup,
  type TensorDims,
} from './model/config.js';
export {
  fullShard,
  kvHeadsFor,
  validateShard,
  rangeLength,
  type Range,
  type ShardSpec,
} from './model/shard.js';
export { singleNodeComm, type LogitsNeed, type RowResult, type ShardComm } from './model/comm.js';
export {
  MemoryModelFile,
  matrixShape,
  rowBytes,
  type ModelFile,
  type TensorEntry,
} from './model/model-file.js';
export { GgufModelFile } from './model/gguf-model-file.js';
export { tinyModelFile, type TinyModelOptions } from './model/tiny-model.js';
export { SequenceCache, type SequenceCacheOptions } from './kv/kv-cache.js';
export {
  generate,
  maxTokensThatFit,
  greedy,
  type CachePositions,
  type Forwarder,
  type GenerateOptions,
  type GenerateResult,
  type TokenPicker,
} from './generate/generate.js';
export * from './tokenizer/index.js';
export * from './sampling/index.js';
export * from './chat/index.js';
