import { buildNative } from './build-kernels.js';

/**
 * Optional native (C) twins of the hottest WebAssembly kernels, compiled on this machine
 * with -O3 tuned to this CPU when a C compiler is present (x86-64: AVX2 / AVX-512 / VNNI;
 * arm64: NEON with dotprod / i8mm; the same symbols from both source sets), loaded through koffi, and run in
 * place on the kernels' WebAssembly memories (same layouts, same thread split). Never
 * required: without a compiler the wasm kernels run alone.
 */

const mmArgs =
  'uint32_t wq, uint32_t ws, int cols, uint32_t x16, uint32_t xd, uint32_t xs, int n, uint32_t y, int ystride, int tiles, int tid, int nt';

/**
 * Wasm export name -> koffi prototype of its native twin (first argument: the memory's
 * address). Every build has these.
 */
const basePrototypes: Readonly<Record<string, string>> = {
  copy_rows:
    'void tk_copy_rows(uintptr_t base, uintptr_t far, uint32_t off, int stride, int cols, int n, int in, int tid, int nt)',
};

/** Q8_0 / Q4_0 in the wasm kernels' tile layout: every build but the grouped ones. */
const tileTwinPrototypes: Readonly<Record<string, string>> = {
  mm_q8_0: `void tk_mm_q8_0(uintptr_t base, ${mmArgs})`,
  mm_q4_0: `void tk_mm_q4_0(uintptr_t base, ${mmArgs})`,
};

/** Attention, SwiGLU, RMSNorm and RoPE exist in AVX-512, AVX2 (with FMA and F16C) and NEON builds; elsewhere the wasm ones run. */
const opsPrototypes: Readonly<Record<string, string>> = {
  attention:
    'void tk_attention(uintptr_t base, uint32_t q, uint32_t k, uint32_t v, uint32_t out, uint32_t scratch, int scratchStride, int n, int heads, int kvHeads, int hd, int pos0, float scale, int half, int tid, int nt)',
  attention_rows:
    'void tk_attention_rows(uintptr_t base, uint32_t q, uint32_t rows, uint32_t out, uint32_t scratch, int scratchStride, int n, int heads, int kvHeads, int hd, float scale, int half, int tid, int nt)',
  swiglu: 'void tk_swiglu(uintptr_t base, uint32_t g, uint32_t u, uint32_t out, int count, int tid, int nt)',
  swiglu_rows:
    'void tk_swiglu_rows(uintptr_t base, uint32_t y, int ystride, int half, int n, int tid, int nt)',
  rms_norm:
    'void tk_rms_norm(uintptr_t base, uint32_t x, uint32_t w, uint32_t out, int n, int dim, float eps, int tid, int nt)',
  rope: 'void tk_rope(uintptr_t base, uint32_t x, uint32_t cs, int n, int heads, int hd, int half, int neox, int tid, int nt)',
};

/** The float-weight GEMM exists in AVX-512 and NEON builds. */
const floatPrototypes: Readonly<Record<string, string>> = {
  mm_float:
    'void tk_mm_float(uintptr_t base, int type, uint32_t w, int cols, uint32_t x, int n, uint32_t y, int ystride, int tiles, int tid, int nt)',
};

/** The K-quant prefill GEMM on q8_K activations transposed into token groups: AVX-512 VNNI and NEON builds. */
const ktPrototypes: Readonly<Record<string, string>> = {
  kt_prep:
    'void tk_kt_prep(uintptr_t base, uint32_t x16, uint32_t xd, uint32_t xs, int n, int cols, uint32_t xt, uint32_t dxt, uint32_t bst, int tid, int nt)',
  mm_kt:
    'void tk_mm_kt(uintptr_t base, int type, uint32_t w, int rowBytes, int cols, uint32_t xt, uint32_t dxt, uint32_t bst, int n, uint32_t y, int ystride, int tiles, int tid, int nt)',
};

const mmPrepared = 'int n, uint32_t y, int ystride, int tiles, int tid, int nt';

/**
 * Q8_0 / Q4_0 in the tile layout with the activations quantised once per matmul to the
 * blocked q8_0 layouts (q8_prep, q8t_prep; gemm-neon.c): NEON builds.
 */
const tilePrototypes: Readonly<Record<string, string>> = {
  q8_prep:
    'void tk_q8_prep(uintptr_t base, uint32_t x, int n, int cols, uint32_t xu, uint32_t dx, int tid, int nt)',
  q8t_prep:
    'void tk_q8t_prep(uintptr_t base, uint32_t x, int n, int cols, uint32_t xt, uint32_t dxt, int tid, int nt)',
  mm_q8v: `void tk_mm_q8v(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xu, uint32_t dx, ${mmPrepared})`,
  mm_q8t: `void tk_mm_q8t(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xt, uint32_t dxt, ${mmPrepared})`,
  mm_q8tv:
    'void tk_mm_q8tv(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xt, uint32_t dxt, int n, uint32_t xu, uint32_t dx, int d, uint32_t y, int ystride, int tiles, int tid, int nt)',
  mm_q4v: `void tk_mm_q4v(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xu, uint32_t dx, ${mmPrepared})`,
  mm_q4t: `void tk_mm_q4t(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xt, uint32_t dxt, ${mmPrepared})`,
};

/**
 * Q8_0 / Q4_0 in the lanes layouts (weights re-laid at upload; gemm-vnni.c, q4-vnni.c), with
 * the activations quantised once per matmul to the lanes activation layouts: AVX-512 VNNI builds.
 */
const lanesPrototypes: Readonly<Record<string, string>> = {
  repack_q8l:
    'void tk_repack_q8l(uintptr_t base, uint32_t src, int rows, int r0, int cols, uint32_t wq, uint32_t ws, int tid, int nt)',
  repack_q4l:
    'void tk_repack_q4l(uintptr_t base, uint32_t src, int rows, int r0, int cols, uint32_t wq, uint32_t ws, int tid, int nt)',
  q8l_prep:
    'void tk_q8l_prep(uintptr_t base, uint32_t x, int n, int cols, uint32_t xq, uint32_t dxc, int tid, int nt)',
  q8lt_prep:
    'void tk_q8lt_prep(uintptr_t base, uint32_t x, int n, int cols, uint32_t xt, uint32_t dxt, int tid, int nt)',
  mm_q8l: `void tk_mm_q8l(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xq, uint32_t dxc, ${mmPrepared})`,
  mm_q8lt: `void tk_mm_q8lt(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xt, uint32_t dxt, ${mmPrepared})`,
  mm_q8ltv:
    'void tk_mm_q8ltv(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xt, uint32_t dxt, int n, uint32_t xq, uint32_t dxc, int d, uint32_t y, int ystride, int tiles, int tid, int nt)',
  mm_q4l: `void tk_mm_q4l(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xq, uint32_t dxc, ${mmPrepared})`,
  mm_q4lt: `void tk_mm_q4lt(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xt, uint32_t dxt, ${mmPrepared})`,
};

/**
 * Q8_0 / Q4_0 in the grouped layout (weights re-laid at upload; gemm-avx2.c), with the
 * activations quantised once per matmul to the grouped activation layout, one kernel for any
 * number of tokens: AVX2 builds without AVX-512.
 */
const groupedPrototypes: Readonly<Record<string, string>> = {
  repack_q8g:
    'void tk_repack_q8g(uintptr_t base, uint32_t src, int rows, int r0, int cols, uint32_t wq, uint32_t ws, int tid, int nt)',
  repack_q4g:
    'void tk_repack_q4g(uintptr_t base, uint32_t src, int rows, int r0, int cols, uint32_t wq, uint32_t ws, int tid, int nt)',
  q8g_prep:
    'void tk_q8g_prep(uintptr_t base, uint32_t x, int n, int cols, uint32_t xq, uint32_t dx, int tid, int nt)',
  mm_q8g: `void tk_mm_q8g(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xq, uint32_t dx, ${mmPrepared})`,
  mm_q4g: `void tk_mm_q4g(uintptr_t base, uint32_t wq, uint32_t ws, int cols, uint32_t xq, uint32_t dx, ${mmPrepared})`,
};

/** K-quants times q8_K activations (kquant.c, kquant-neon.c): AVX-512, AVX2 with F16C, and NEON builds (tk_kv). */
const kvPrototypes: Readonly<Record<string, string>> = {
  kv_prep:
    'void tk_kv_prep(uintptr_t base, uint32_t x16, int n, int cols, uint32_t xq, uint32_t bs, int type, int tid, int nt)',
  mm_kv:
    'void tk_mm_kv(uintptr_t base, int type, uint32_t w, int rowBytes, int cols, uint32_t xq, uint32_t xd, uint32_t bs, int n, uint32_t y, int ystride, int tiles, int tid, int nt)',
};

export interface NativeLib {
  path: string;
  /** Instruction set the library was compiled for: avx512-vnni, avx512, avx2, neon-i8mm, neon-dotprod or neon. */
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
        nativeUnavailableReason =
          'no AVX2 or AVX-512 here: the WebAssembly SIMD kernels are faster than scalar C';
        return undefined;
      }
      // NEON builds carry every kernel of an AVX-512 VNNI build (Q8_0/Q4_0 in the tile layout, not the lanes one)
      const full = isa === 'avx512' || isa.startsWith('neon');
      const ops = full || Number(lib.func('int tk_ops(void)')()) === 1;
      const vnni = full && Number(lib.func('int tk_vnni512(void)')()) === 1;
      const kv = Number(lib.func('int tk_kv(void)')()) === 1;
      const grouped = isa === 'avx2' && Number(lib.func('int tk_grouped(void)')()) === 1;
      const prototypes = {
        ...basePrototypes,
        // grouped builds hold Q8_0 / Q4_0 in the grouped layout only
        ...(grouped ? groupedPrototypes : tileTwinPrototypes),
        ...(ops ? opsPrototypes : {}),
        ...(full ? floatPrototypes : {}),
        ...(vnni ? ktPrototypes : {}),
        ...(vnni ? (isa.startsWith('neon') ? tilePrototypes : lanesPrototypes) : {}),
        ...(kv ? kvPrototypes : {}),
      };
      return { path, isa: vnni && isa === 'avx512' ? 'avx512-vnni' : isa, prototypes };
    } catch (err) {
      nativeUnavailableReason = (err as Error).message.split('\n')[0] ?? 'unknown';
      return undefined;
    }
  })();
  return loaded;
}
