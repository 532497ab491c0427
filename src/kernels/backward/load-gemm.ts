import { referenceGemm, type Gemm } from './gemm.js';
import { loadNativeGemm } from './gemm-native.js';
import { loadWasmGemm } from './gemm-wasm.js';

/** The GEMMs a training run can ask for: native C (default), wasm SIMD, or the TypeScript twin. */
export type GemmKind = 'native' | 'wasm' | 'reference';

export const gemmKinds: readonly GemmKind[] = ['native', 'wasm', 'reference'];

/**
 * The GEMMs of `kind`. `native` falls back to the wasm twin (one thread) where no C compiler
 * works, and says why through `onFallback`; `threads` and `hostThreads` (loadNativeGemm's)
 * apply to the native GEMMs only.
 */
export async function loadGemm(
  kind: GemmKind,
  threads = 1,
  onFallback?: (why: string) => void,
  hostThreads = threads,
): Promise<Gemm> {
  if (kind === 'reference') return referenceGemm;
  if (kind === 'native') {
    try {
      return await loadNativeGemm(threads, hostThreads);
    } catch (e) {
      onFallback?.(`native GEMMs unavailable (${(e as Error).message}); using the wasm ones on one thread`);
    }
  }
  return loadWasmGemm();
}
