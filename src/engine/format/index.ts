export { GgufFile, parseGguf, type GgufHeader, type ReadTensorOptions } from './gguf-reader.js';
export { GgufMetadata } from './gguf-metadata.js';
export { GgufValueType, type GgufArray, type GgufTensorInfo, type GgufValue } from './gguf-types.js';
export { encodeGguf, gv, layoutTensors, writeGguf, type TensorSpec } from './gguf-writer.js';
export { SafetensorsFile, encodeSafetensors, type SafetensorsTensorInfo } from './safetensors.js';
export { SafetensorsModel } from './safetensors-model.js';
export { loadHfConfig, parseHfConfig, type HfConfig } from './hf-config.js';
export { buildBpeVocab, buildSpmVocab, vocabMetadata, type Vocab } from './vocab.js';
export { makeModel, planFor, tensorF32, type MakeModelOptions } from './make-model.js';
export {
  fileTypes,
  modelArchs,
  modelShapes,
  type FileTypeName,
  type ModelArch,
  type ModelShape,
} from './model-plan.js';
export { BufferSource, FileSource, type ByteSource } from './byte-source.js';
