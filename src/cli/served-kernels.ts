import { performance } from 'node:perf_hooks';
import { loadServedModel, servingParts, type LoadServedOptions, type ServedModel } from '../api/index.js';
import { chooseKernels, type GpuDevice, type KernelsChoice } from '../kernels/webgpu/index.js';
import { gpuRefusalFor, openGpuModel } from './webgpu-model.js';

/**
 * A model served from this process on the backend `--kernels` chooses: the CPU engine
 * (loadServedModel), or the WebGPU forward pass, whose forwardBatch keeps each row's bits
 * those of the row alone, as the scheduler's batched decode needs.
 */
export async function loadKernelsServedModel(
  path: string,
  kernels: KernelsChoice | undefined,
  options: LoadServedOptions = {},
): Promise<ServedModel> {
  const log = options.log ?? (() => {});
  // the context a slot gets unless --context says otherwise (servingParts)
  const chosen = await chooseKernels(kernels, gpuRefusalFor(path, options.context ?? 4096));
  if (chosen.backend === 'webgpu') return loadGpuServedModel(path, chosen.device, chosen.adapter, options);
  if ('note' in chosen && chosen.note !== undefined) log(chosen.note);
  return loadServedModel(path, { ...options, ...(chosen.backend ? { backend: chosen.backend } : {}) });
}

/** Loads the model at `path` onto `device` (which it then owns) for serving. */
export async function loadGpuServedModel(
  path: string,
  device: GpuDevice,
  adapter: string,
  options: LoadServedOptions = {},
): Promise<ServedModel> {
  const log = options.log ?? (() => {});
  const start = performance.now();
  const seconds = (): string => ((performance.now() - start) / 1000).toFixed(1);
  log(`loading ${path} onto ${adapter} (WebGPU)`);
  let shown = 0;
  const onLayer = (loaded: number, total: number): void => {
    if (loaded < total && Math.floor((10 * loaded) / total) === shown) return;
    shown = Math.floor((10 * loaded) / total);
    log(`weights: ${loaded}/${total} layers (${seconds()} s)`);
  };
  const gpu = await openGpuModel(path, device, { onLayer });
  try {
    const parts = servingParts(path, gpu.file, gpu.tokenizer, gpu.config, options, log);
    log(
      `loaded ${parts.config.arch}, ${parts.config.blockCount} layers, vocabulary ${parts.config.vocabSize}, context ${parts.contextLength} per slot, webgpu kernels on ${adapter}, in ${seconds()} s`,
    );
    return { ...parts, model: gpu, close: () => gpu.close() };
  } catch (error) {
    await gpu.close();
    throw error;
  }
}
