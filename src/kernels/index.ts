import { availableParallelism } from 'node:os';
import { ReferenceKernels } from './reference.js';
import type { Kernels, KernelsOptions } from './types.js';

export * from './types.js';
export { blockInfo, rowBytes, supportedTypes, typeName, isSupportedType } from './ggml-blocks.js';
export { llama3FreqFactors, type Llama3Scaling } from './rope.js';
export { f16ToF32, f32ToF16, bf16ToF32, f32ToBf16 } from './half.js';
export { dequantRow } from './ref/quant-ref.js';
export { ReferenceKernels } from './reference.js';

/**
 * Creates a kernels backend. 'wasm' (the default) is the fast path: WebAssembly SIMD with
 * `threads` compute threads (the caller's thread plus threads - 1 workers); 'reference' is
 * the plain TypeScript twin.
 */
export async function createKernels(options: KernelsOptions = {}): Promise<Kernels> {
  const threads = options.threads ?? availableParallelism();
  if (options.backend === 'reference') return new ReferenceKernels();
  const { createWasmKernels } = await import('./wasm-kernels.js');
  return createWasmKernels(threads, options.arenaBytes);
}
