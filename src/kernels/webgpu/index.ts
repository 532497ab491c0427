// The WebGPU backend's public surface (WGSL kernels through Dawn): adapter discovery, the
// `--kernels` choice, and a llama-family model (dense or MoE) held and run on the GPU.
export { findAdapter, probeAdapter, describeAdapter, type AdapterInfo, type GpuLimits } from './adapter.js';
export { GpuDevice } from './gpu-device.js';
export { GpuOps, type AttentionShape } from './gpu-ops.js';
export { gpuTypes, gpuRowBytes, uploadGpuWeight, type GpuWeight } from './gpu-weights.js';
export { GpuLlama, GPU_CHUNK } from './gpu-llama.js';
export type { GpuLlamaSpec, GpuReduce, GpuShardShape } from './gpu-llama-spec.js';
export { GpuKvCache, type GpuSequence } from './gpu-kv-cache.js';
export type { GpuExpertSlice, GpuStagedExperts, GpuTensorReader } from './gpu-layer-weights.js';
export type { GpuExpertExchange, GpuExpertRunner, GpuRoutedShare } from './gpu-moe.js';
export {
  chooseKernels,
  isKernelsChoice,
  kernelsChoices,
  type ChosenKernels,
  type GpuRefusal,
  type KernelsChoice,
} from './choose-kernels.js';
