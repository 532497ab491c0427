import { availableParallelism } from 'node:os';
import type { Gemm } from './gemm.js';
import { buildTrainKernels } from './native-build.js';
import { bindNativeOps } from './ops-native.js';

/**
 * The native twin of gemm.ts (gemm-native.c, built by native-build.ts), loaded through koffi
 * and run on the caller's Float32Arrays in place (no copies, unlike the wasm twin), with the
 * native element-wise ops of the same library (ops-native.ts) as its `ops`. `threads` splits a
 * product's column panels over OpenMP threads; the result does not depend on it (each output
 * is one sum in increasing k on whichever thread computes it).
 */

type Native = (
  mode: number,
  a: Float32Array,
  b: Float32Array,
  c: Float32Array,
  m: number,
  n: number,
  k: number,
  acc: number,
  threads: number,
) => void;

export interface NativeGemm extends Gemm {
  /** Threads a product is split over (1: the calling thread only). */
  readonly threads: number;
  /** Whether the library was built with OpenMP (without it every product runs on one thread). */
  readonly threaded: boolean;
}

/**
 * Loads the native GEMMs on `threads` threads; throws KERNELS_BUILD_FAILED where no C
 * compiler works (the caller falls back to the wasm twin). `hostThreads`: the compute threads
 * of every process on this host that trains beside this one (local ranks x threads). Past the
 * cores, OpenMP's threads must sleep between products instead of spinning (OMP_WAIT_POLICY
 * passive, unless the user set it): a spinning thread takes the timeslices of another
 * process's thread that its peers wait for. libgomp reads the variable when the library is
 * first loaded, so it is set before.
 */
export async function loadNativeGemm(threads = 1, hostThreads = threads): Promise<NativeGemm> {
  if (hostThreads > availableParallelism() && process.env.OMP_WAIT_POLICY === undefined)
    process.env.OMP_WAIT_POLICY = 'passive';
  const path = await buildTrainKernels();
  const { default: koffi } = await import('koffi');
  const lib = koffi.load(path);
  const fn = lib.func(
    'void tg_gemm(int mode, const float *a, const float *b, float *c, int m, int n, int k, int acc, int threads)',
  ) as Native;
  const threaded = (lib.func('int tg_threaded(void)') as () => number)() === 1;
  return {
    name: 'native',
    threads,
    threaded,
    ops: bindNativeOps(lib, threads),
    nt: (a, b, c, m, n, k, acc = false) => fn(0, a, b, c, m, n, k, acc ? 1 : 0, threads),
    nn: (a, b, c, m, n, k, acc = false) => fn(1, a, b, c, m, n, k, acc ? 1 : 0, threads),
    tn: (a, b, c, m, n, k, acc = false) => fn(2, a, b, c, m, n, k, acc ? 1 : 0, threads),
  };
}
