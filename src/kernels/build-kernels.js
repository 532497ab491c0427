// Builds tandem's kernels: the AssemblyScript sources (src/kernels/wasm/*.ts) into
// build/wasm/kernels.wasm and build/wasm/reduce.wasm (the collectives' reductions), and,
// when a C compiler is present, the optional native kernels (src/kernels/native/*.c, the
// x86-64 or the arm64 set, -O3 tuned to this CPU) into build/native/kernels-<arch>.so. Plain JS so that `node bin/build.js` runs
// it without tsx; the kernels call it lazily at first use too.
import { execFile } from 'node:child_process';
import { mkdirSync, readdirSync, renameSync, statSync } from 'node:fs';
import { promisify } from 'node:util';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const wasmSourceDir = join(root, 'src', 'kernels', 'wasm');
export const wasmPath = join(root, 'build', 'wasm', 'kernels.wasm');
export const reduceWasmPath = join(root, 'build', 'wasm', 'reduce.wasm');

/** asc flags: SIMD, shared memory imported from the host (every thread instantiates on it). */
export const ascFlags = [
  '-O3',
  '--runtime',
  'stub',
  '--noAssert',
  '--enable',
  'simd',
  '--enable',
  'threads',
  '--importMemory',
  '--sharedMemory',
  '--initialMemory',
  '1',
  '--maximumMemory',
  '65536',
];

/** asc flags of the reduce module: SIMD on its own unshared memory, which it exports (see wasm/reduce.ts). */
export const reduceAscFlags = ['-O3', '--runtime', 'stub', '--noAssert', '--enable', 'simd'];

function newestSource() {
  let newest = 0;
  for (const name of readdirSync(wasmSourceDir)) {
    if (name.endsWith('.ts')) newest = Math.max(newest, statSync(join(wasmSourceDir, name)).mtimeMs);
  }
  newest = Math.max(newest, statSync(fileURLToPath(import.meta.url)).mtimeMs); // flags live here
  return newest;
}

export function isStale(path = wasmPath) {
  const st = statSync(path, { throwIfNoEntry: false });
  return !st || st.mtimeMs < newestSource();
}

/** Compiles one AssemblyScript entry of wasmSourceDir to `out` if stale (or forced). */
async function buildWasm(entry, flags, out, { force, quiet }) {
  if (!force && !isStale(out)) return;
  mkdirSync(dirname(out), { recursive: true });
  // A unique temporary name then rename: concurrent builds (parallel tests) never see half a file.
  const tmp = `${out}.${process.pid}.${Date.now()}.tmp`;
  const { default: asc } = await import('assemblyscript/asc');
  let errors = '';
  const sink = (collect) => ({
    write: (s) => {
      if (collect) errors += String(s);
      return true;
    },
  });
  const { error } = await asc.main([join(wasmSourceDir, entry), ...flags, '-o', tmp], {
    stdout: sink(false),
    stderr: sink(true),
  });
  if (error)
    throw new Error(`asc failed to compile ${join(wasmSourceDir, entry)}: ${error.message}\n${errors}`);
  renameSync(tmp, out);
  if (!quiet) console.log(`built ${out}`);
}

/** Builds both modules (kernels.wasm, reduce.wasm) if stale (or forced); returns kernels.wasm's path. Throws with asc's output on failure. */
export async function buildKernels({ force = false, quiet = true } = {}) {
  await buildWasm('kernels.ts', ascFlags, wasmPath, { force, quiet });
  await buildReduceWasm({ force, quiet });
  return wasmPath;
}

/** Builds reduce.wasm alone if stale (or forced); returns its path. */
export async function buildReduceWasm({ force = false, quiet = true } = {}) {
  await buildWasm('reduce.ts', reduceAscFlags, reduceWasmPath, { force, quiet });
  return reduceWasmPath;
}

export const nativeDir = join(root, 'src', 'kernels', 'native');
export const nativeSource = join(nativeDir, 'kernels.c');
/**
 * The C sources compiled together into the native library, per target architecture (headers:
 * common.h, neon.h): x86-64 (AVX2 / AVX-512 / VNNI, chosen by -march) and arm64 (NEON, with
 * dotprod and i8mm when the target has them). Both export the same symbols.
 */
export const nativeSourcesByArch = {
  x64: [
    'kernels.c',
    'gemm-avx2.c',
    'gemm-vnni.c',
    'ops.c',
    'kquant.c',
    'kquant-gemm.c',
    'q4-vnni.c',
    'copy.c',
  ].map((f) => join(nativeDir, f)),
  arm64: ['kernels-neon.c', 'gemm-neon.c', 'ops-neon.c', 'kquant-neon.c', 'copy.c'].map((f) =>
    join(nativeDir, f),
  ),
};
export const nativeSources = nativeSourcesByArch.x64;

/**
 * $TANDEM_NATIVE_CFLAGS (space-separated) replaces the target flags (-march=native and its
 * fallbacks), e.g. `-march=armv8.2-a+dotprod` to build one arm64 variant on purpose; each
 * value gets its own library file, so variants never overwrite each other.
 */
function flagsOverride() {
  const v = process.env.TANDEM_NATIVE_CFLAGS?.trim();
  return v ? v.split(/\s+/) : undefined;
}

function variantSuffix() {
  const v = process.env.TANDEM_NATIVE_CFLAGS?.trim();
  if (!v) return '';
  let h = 0;
  for (const c of v) h = (Math.imul(h, 31) + c.charCodeAt(0)) >>> 0;
  return `-${h.toString(16)}`;
}

/** The library for this process's architecture (the one that loads it). */
export const nativePath = join(root, 'build', 'native', `kernels-${process.arch}${variantSuffix()}.so`);

function newestNativeSource() {
  let newest = statSync(fileURLToPath(import.meta.url)).mtimeMs; // flags live here
  for (const name of readdirSync(nativeDir)) {
    if (name.endsWith('.c') || name.endsWith('.h'))
      newest = Math.max(newest, statSync(join(nativeDir, name)).mtimeMs);
  }
  return newest;
}

/** The compiler's target: 'x64', 'arm64', or undefined for any other (no native kernels there). */
async function targetArch(run, cc) {
  const { stdout } = await run(cc, ['-dumpmachine'], { timeout: 30_000 });
  const machine = stdout.trim();
  if (/^(x86_64|amd64)/.test(machine)) return 'x64';
  if (/^(aarch64|arm64)/.test(machine)) return 'arm64';
  return undefined;
}

/**
 * Builds the native kernels if stale (or forced) with $CC (default cc) for the compiler's
 * target (x86-64 or arm64), tuned to this CPU where the compiler can (-march=native on x86,
 * -mcpu=native on arm64; plain flags otherwise); returns the shared library's path. Throws
 * when no compiler works or it targets another architecture: callers fall back to the wasm
 * kernels.
 */
export async function buildNative({ force = false, quiet = true } = {}) {
  const out = statSync(nativePath, { throwIfNoEntry: false });
  if (!force && out && out.mtimeMs >= newestNativeSource()) return nativePath;
  mkdirSync(dirname(nativePath), { recursive: true });
  const tmp = `${nativePath}.${process.pid}.${Date.now()}.tmp`;
  const run = promisify(execFile);
  const cc = process.env.CC ?? 'cc';
  const arch = await targetArch(run, cc);
  if (!arch) throw new Error(`${cc} targets neither x86-64 nor arm64: no native kernels for it`);
  if (arch !== process.arch)
    throw new Error(
      `${cc} builds for ${arch} but this Node runs on ${process.arch}: unset CC or point it at a compiler for ${process.arch}`,
    );
  // an undeclared function is an error, not a library with an undefined symbol that fails to load
  const args = [
    '-O3',
    '-Werror=implicit-function-declaration',
    '-shared',
    '-fPIC',
    '-o',
    tmp,
    ...nativeSourcesByArch[arch],
    '-lm',
  ];
  const tries = flagsOverride()
    ? [flagsOverride()]
    : arch === 'x64'
      ? [['-march=native'], []]
      : [['-mcpu=native'], ['-march=native'], []];
  for (let i = 0; ; i++) {
    try {
      await run(cc, [...tries[i], ...args], { timeout: 120_000 });
      break;
    } catch (err) {
      if (i === tries.length - 1) throw err;
    }
  }
  renameSync(tmp, nativePath);
  if (!quiet) console.log(`built ${nativePath}`);
  return nativePath;
}
