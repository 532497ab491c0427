import { buildNative } from './build-kernels.js';

/**
 * Optional native (C) twins of the hottest WebAssembly kernels, compiled on this machine
 * with -O3 -march=native when a C compiler is present, loaded through koffi, and run in
 * place on the kernels' WebAssembly memories (same layouts, same thread split). Never
 * required: without a compiler the wasm kernels run alone.
 */

const mmArgs = 'uint32_t wq, uint32_t ws, int cols, uint32_t x16, uint32_t xd, uint32_t xs, int n, uint32_t y, int ystride, int tiles, int tid, int nt';

/** Wasm export name -> koffi prototype of its native twin (first argument: the memory's address). */
export const nativePrototypes: Readonly<Record<string, string>> = {
  mm_q8_0: `void tk_mm_q8_0(uintptr_t base, ${mmArgs})`,
  mm_q4_0: `void tk_mm_q4_0(uintptr_t base, ${mmArgs})`,
};

/** K-quant and float kernels exist only in AVX-512 builds; elsewhere the wasm ones run. */
const kQuantPrototypes: Readonly<Record<string, string>> = {
  mm_float: 'void tk_mm_float(uintptr_t base, int type, uint32_t w, int cols, uint32_t x, int n, uint32_t y, int ystride, int tiles, int tid, int nt)',
  mm_k: 'void tk_mm_k(uintptr_t base, int type, uint32_t w, int rowBytes, int cols, uint32_t x16, uint32_t xd, uint32_t xs, int n, uint32_t y, int ystride, int tiles, int tid, int nt)',
};

export interface NativeLib {
  path: string;
  /** Instruction set the library was compiled for: avx512, avx2 or scalar. */
  isa: string;
  prototypes: Readonly<Record<string, string>>;
}

let loaded: Promise<NativeLib | undefined> | undefined;
/** Why the native library is unavailable (for `--verbose` output), if it is. */
export let nativeUnavailableReason = '';

/** Builds (when stale) and loads the native library; undefined when that is impossible here. */
export function loadNativeLib(): Promise<NativeLib | undefined> {
  loaded ??= (async () => {
    try {
      const path = await buildNative();
      const { default: koffi } = await import('koffi');
      const lib = koffi.load(path);
      const isa = String(lib.func('const char *tk_isa(void)')());
      if (isa === 'scalar') {
        nativeUnavailableReason = 'no AVX2 or AVX-512 here: the WebAssembly SIMD kernels are faster than scalar C';
        return undefined;
      }
      return { path, isa, prototypes: isa === 'avx512' ? { ...nativePrototypes, ...kQuantPrototypes } : nativePrototypes };
    } catch (err) {
      nativeUnavailableReason = (err as Error).message.split('\n')[0] ?? 'unknown';
      return undefined;
    }
  })();
  return loaded;
}
