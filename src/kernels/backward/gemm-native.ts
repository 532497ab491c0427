import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { TandemError } from '../../errors/index.js';
import type { Gemm } from './gemm.js';

/**
 * The native twin of gemm.ts (gemm-native.c): compiled on this machine at first use with
 * -O3 -march=native (and OpenMP where the compiler has it), loaded through koffi, and run on
 * the caller's Float32Arrays in place (no copies, unlike the wasm twin). `threads` splits a
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

const root = resolve(import.meta.dirname, '..', '..', '..');
const source = join(import.meta.dirname, 'gemm-native.c');
const baseFlags = ['-O3', '-march=native', '-fno-strict-aliasing', '-shared', '-fPIC'];

export interface NativeGemm extends Gemm {
  /** Threads a product is split over (1: the calling thread only). */
  readonly threads: number;
  /** Whether the library was built with OpenMP (without it every product runs on one thread). */
  readonly threaded: boolean;
}

async function compile(flags: string[]): Promise<string> {
  const hash = createHash('sha256').update(readFileSync(source)).update(flags.join(' ')).digest('hex');
  const lib = join(root, 'build', 'native', `train-gemm-${hash.slice(0, 12)}.so`);
  if (existsSync(lib)) return lib;
  mkdirSync(dirname(lib), { recursive: true });
  // a unique temporary name, then rename: concurrent builds never load half a file
  const tmp = `${lib}.${process.pid}.${Date.now()}.tmp`;
  await promisify(execFile)(process.env.CC ?? 'cc', [...flags, '-o', tmp, source], { timeout: 120_000 });
  renameSync(tmp, lib);
  return lib;
}

let built: Promise<string> | undefined;

/** Builds the library (OpenMP first, else serial) and returns its path. */
function buildNativeGemm(): Promise<string> {
  built ??= compile([...baseFlags, '-fopenmp']).catch(() => compile(baseFlags));
  return built;
}

/**
 * Loads the native GEMMs on `threads` threads; throws KERNELS_BUILD_FAILED where no C
 * compiler works (the caller falls back to the wasm twin).
 */
export async function loadNativeGemm(threads = 1): Promise<NativeGemm> {
  let path: string;
  try {
    path = await buildNativeGemm();
  } catch (e) {
    built = undefined;
    throw new TandemError(
      'KERNELS_BUILD_FAILED',
      `cannot compile ${source}: ${((e as Error).message.split('\n')[0] ?? '').slice(0, 300)}`,
      { hint: 'install a C compiler (apt-get install gcc), or use --kernels wasm' },
    );
  }
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
    nt: (a, b, c, m, n, k, acc = false) => fn(0, a, b, c, m, n, k, acc ? 1 : 0, threads),
    nn: (a, b, c, m, n, k, acc = false) => fn(1, a, b, c, m, n, k, acc ? 1 : 0, threads),
    tn: (a, b, c, m, n, k, acc = false) => fn(2, a, b, c, m, n, k, acc ? 1 : 0, threads),
  };
}
