import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { TandemError } from '../../errors/index.js';

/**
 * The training kernels' C (gemm-native.c: the products; ops-native.c: the element-wise ops,
 * cross-entropy, attention, AdamW) compiled on this machine at first use into one library,
 * build/native/train-gemm-HASH.so, HASH over the sources and flags: -O3 -march=native with
 * OpenMP where the compiler has it, else without (every call then runs on one thread).
 */

const root = resolve(import.meta.dirname, '..', '..', '..');
export const nativeSources = ['gemm-native.c', 'ops-native.c'].map((f) => join(import.meta.dirname, f));
const baseFlags = ['-O3', '-march=native', '-fno-strict-aliasing', '-fno-math-errno', '-shared', '-fPIC'];

async function compile(flags: string[]): Promise<string> {
  const hash = createHash('sha256');
  for (const s of nativeSources) hash.update(readFileSync(s));
  const digest = hash.update(flags.join(' ')).digest('hex');
  const lib = join(root, 'build', 'native', `train-gemm-${digest.slice(0, 12)}.so`);
  if (existsSync(lib)) return lib;
  mkdirSync(dirname(lib), { recursive: true });
  // a unique temporary name, then rename: concurrent builds never load half a file
  const tmp = `${lib}.${process.pid}.${Date.now()}.tmp`;
  await promisify(execFile)(process.env.CC ?? 'cc', [...flags, '-o', tmp, ...nativeSources, '-lm'], {
    timeout: 120_000,
  });
  renameSync(tmp, lib);
  return lib;
}

let built: Promise<string> | undefined;

/**
 * Builds the library (OpenMP first, else serial) and returns its path; throws
 * KERNELS_BUILD_FAILED where no C compiler works.
 */
export async function buildTrainKernels(): Promise<string> {
  // without an OpenMP runtime, -fopenmp-simd still vectorises the ops' `omp simd` loops
  built ??= compile([...baseFlags, '-fopenmp'])
    .catch(() => compile([...baseFlags, '-fopenmp-simd']))
    .catch(() => compile(baseFlags));
  try {
    return await built;
  } catch (e) {
    built = undefined;
    throw new TandemError(
      'KERNELS_BUILD_FAILED',
      `cannot compile ${nativeSources.join(', ')}: ${((e as Error).message.split('\n')[0] ?? '').slice(0, 300)}`,
      { hint: 'install a C compiler (apt-get install gcc), or use --kernels wasm' },
    );
  }
}
