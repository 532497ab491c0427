import type { Kernels } from './types.js';
import { ReferenceKernels } from './reference.js';

/** Placeholder until the WebAssembly backend lands: behaves as the reference twin. */
export async function createWasmKernels(_threads: number): Promise<Kernels> {
  return new ReferenceKernels();
}
