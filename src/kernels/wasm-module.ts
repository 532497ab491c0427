import { readFile } from 'node:fs/promises';
import { wasmApi, type WasmModule } from './wasm-api.js';
import { TandemError } from '../errors/index.js';
import { buildKernels } from './build-kernels.js';

/** Names of the kernel exports the pool dispatches, in a fixed order (job op = index). */
// copy_rows, rms_norm, rope, swiglu_rows and attention_rows exist only as native (AVX-512 / NEON) kernels; kt_prep and mm_kt (and kv_prep, mm_kv)
// only as native AVX-512 VNNI / NEON ones; Q8_0 / Q4_0 with prepared activations in the tile layout (q8_prep, q8t_prep,
// mm_q8v, mm_q8t, mm_q8tv, mm_q4v, mm_q4t) only on NEON, and in the lanes layouts (repack_q8l, repack_q4l, q8l_prep,
// q8lt_prep, mm_q8l, mm_q8lt, mm_q8ltv, mm_q4l, mm_q4lt) only on AVX-512 VNNI, and in the grouped layout (repack_q8g,
// repack_q4g, q8g_prep, mm_q8g, mm_q4g) only on AVX2 without AVX-512.
export const kernelNames = [
  'quant_q8_0',
  'quant_q8_k',
  'mm_q8_0',
  'mm_q4_0',
  'mm_k',
  'mm_float',
  'attention',
  'store_f16',
  'round_x',
  'repack_q',
  'quant_part',
  'swiglu',
  'q8_prep',
  'mm_q8v',
  'q8t_prep',
  'mm_q8t',
  'rms_norm',
  'rope',
  'kt_prep',
  'mm_kt',
  'swiglu_rows',
  'mm_q8tv',
  'kv_prep',
  'mm_kv',
  'mm_q4v',
  'mm_q4t',
  'repack_q8l',
  'q8l_prep',
  'q8lt_prep',
  'mm_q8l',
  'mm_q8lt',
  'mm_q8ltv',
  'repack_q4l',
  'mm_q4l',
  'mm_q4lt',
  'attention_rows',
  'copy_rows',
  'repack_q8g',
  'repack_q4g',
  'q8g_prep',
  'mm_q8g',
  'mm_q4g',
] as const;
export type KernelName = (typeof kernelNames)[number];
export const op = Object.fromEntries(kernelNames.map((n, i) => [n, i])) as Record<KernelName, number>;

let compiled: Promise<WasmModule> | undefined;

/**
 * The compiled kernels module, built first (build-kernels.js) when build/wasm/kernels.wasm is
 * missing or older than its AssemblyScript sources (so a fresh checkout works after `npm ci`).
 */
export function kernelsModule(): Promise<WasmModule> {
  compiled ??= (async () => {
    let path: string;
    try {
      path = await buildKernels();
    } catch (cause) {
      compiled = undefined;
      throw new TandemError(
        'KERNELS_BUILD_FAILED',
        `could not build the WebAssembly kernels: ${(cause as Error).message}`,
        {
          hint: 'run `npm ci` (assemblyscript is a dependency), then `npm run build`; or use --backend reference',
          cause,
        },
      );
    }
    return wasmApi.compile(await readFile(path));
  })();
  return compiled;
}
