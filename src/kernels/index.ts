import { availableParallelism } from 'node:os';
import { ReferenceKernels } from './reference.js';
import { TandemError } from '../errors/index.js';
import type { Kernels, KernelsOptions } from './types.js';

export * from './types.js';
export { blockInfo, rowBytes, supportedTypes, typeName, isSupportedType } from './ggml-blocks.js';
export { llama3FreqFactors, type Llama3Scaling } from './rope.js';
export { f16ToF32, f32ToF16, bf16ToF32, f32ToBf16 } from './half.js';
export { dequantRow } from './ref/quant-ref.js';
export { rmsNormRef } from './ref/ops-ref.js';
export { ReferenceKernels } from './reference.js';

/**
 * Creates a kernels backend with `threads` compute threads (the caller's thread plus
 * threads - 1 workers). Without `backend` the fastest available is used: 'native' when a C
 * compiler builds the native kernels here, else 'wasm'. 'reference' is the TypeScript twin.
 */
export async function createKernels(options: KernelsOptions = {}): Promise<Kernels> {
  const threads = options.threads ?? availableParallelism();
  if (options.backend === 'reference') return new ReferenceKernels();
  const { createWasmKernels } = await import('./wasm-kernels.js');
  if (options.backend === 'wasm')
    return createWasmKernels(threads, options.arenaBytes, undefined, options.smallJob);
  const { loadNativeLib, nativeUnavailableReason } = await import('./native-lib.js');
  const native = await loadNativeLib();
  if (!native && options.backend === 'native') {
    throw new TandemError(
      'KERNELS_BUILD_FAILED',
      `the native kernels could not be built or loaded: ${nativeUnavailableReason}`,
      {
        hint: 'install a C compiler (e.g. apt-get install gcc) or use --backend wasm',
      },
    );
  }
  return createWasmKernels(threads, options.arenaBytes, native, options.smallJob);
}
