import { execFile } from 'node:child_process';
import { mkdirSync, renameSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

/**
 * Optional native (C) twins of the hottest WebAssembly kernels, compiled on this machine
 * with -O3 -march=native when a C compiler is present, loaded through koffi, and run in
 * place on the kernels' WebAssembly memories (same layouts, same thread split). Never
 * required: without a compiler the wasm kernels run alone.
 */

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const source = join(root, 'src', 'kernels', 'native', 'kernels.c');
const output = join(root, 'build', 'native', 'kernels.so');

const mmArgs = 'uint32_t wq, uint32_t ws, int cols, uint32_t x16, uint32_t xd, uint32_t xs, int n, uint32_t y, int ystride, int tiles, int tid, int nt';

/** Wasm export name -> koffi prototype of its native twin (first argument: the memory's address). */
export const nativePrototypes: Readonly<Record<string, string>> = {
  mm_q8_0: `void tk_mm_q8_0(uintptr_t base, ${mmArgs})`,
  mm_q4_0: `void tk_mm_q4_0(uintptr_t base, ${mmArgs})`,
};

/** K-quant kernels exist only in AVX-512 builds; elsewhere the wasm ones run. */
const kQuantPrototypes: Readonly<Record<string, string>> = {
  mm_k: 'void tk_mm_k(uintptr_t base, int type, uint32_t w, int rowBytes, int cols, uint32_t x16, uint32_t xd, uint32_t xs, int n, uint32_t y, int ystride, int tiles, int tid, int nt)',
};

export interface NativeLib {
  path: string;
  /** Instruction set the library was compiled for: avx512, avx2 or scalar. */
  isa: string;
  prototypes: Readonly<Record<string, string>>;
}

const run = promisify(execFile);

async function compile(): Promise<void> {
  mkdirSync(dirname(output), { recursive: true });
  const tmp = `${output}.${process.pid}.${Date.now()}.tmp`;
  const cc = process.env.CC ?? 'cc';
  const base = ['-O3', '-shared', '-fPIC', '-o', tmp, source];
  try {
    await run(cc, ['-march=native', ...base], { timeout: 60_000 });
  } catch {
    await run(cc, base, { timeout: 60_000 });
  }
  renameSync(tmp, output);
}

let loaded: Promise<NativeLib | undefined> | undefined;
/** Why the native library is unavailable (for `--verbose` output), if it is. */
export let nativeUnavailableReason = '';

/** Builds (when stale) and loads the native library; undefined when that is impossible here. */
export function loadNativeLib(): Promise<NativeLib | undefined> {
  loaded ??= (async () => {
    try {
      const out = statSync(output, { throwIfNoEntry: false });
      if (!out || out.mtimeMs < statSync(source).mtimeMs) await compile();
      const { default: koffi } = await import('koffi');
      const lib = koffi.load(output);
      const isa = String(lib.func('const char *tk_isa(void)')());
      return { path: output, isa, prototypes: isa === 'avx512' ? { ...nativePrototypes, ...kQuantPrototypes } : nativePrototypes };
    } catch (err) {
      nativeUnavailableReason = (err as Error).message.split('\n')[0] ?? 'unknown';
      return undefined;
    }
  })();
  return loaded;
}
