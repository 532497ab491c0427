// Builds tandem's kernels: the AssemblyScript sources (src/kernels/wasm/*.ts) into
// build/wasm/kernels.wasm, and, when a C compiler is present, the optional native kernels
// (src/kernels/native/*.c, -O3 -march=native) into build/native/kernels.so. Plain JS so
// that `node bin/build.js` runs it without tsx; the kernels call it lazily at first use too.
import { execFile } from 'node:child_process';
import { mkdirSync, readdirSync, renameSync, statSync } from 'node:fs';
import { promisify } from 'node:util';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const wasmSourceDir = join(root, 'src', 'kernels', 'wasm');
export const wasmPath = join(root, 'build', 'wasm', 'kernels.wasm');

/** asc flags: SIMD, shared memory imported from the host (every thread instantiates on it). */
export const ascFlags = [
  '-O3',
  '--runtime', 'stub',
  '--noAssert',
  '--enable', 'simd',
  '--enable', 'threads',
  '--importMemory',
  '--sharedMemory',
  '--initialMemory', '1',
  '--maximumMemory', '65536',
];

function newestSource() {
  let newest = 0;
  for (const name of readdirSync(wasmSourceDir)) {
    if (name.endsWith('.ts')) newest = Math.max(newest, statSync(join(wasmSourceDir, name)).mtimeMs);
  }
  newest = Math.max(newest, statSync(fileURLToPath(import.meta.url)).mtimeMs); // flags live here
  return newest;
}

export function isStale() {
  const st = statSync(wasmPath, { throwIfNoEntry: false });
  return !st || st.mtimeMs < newestSource();
}

/** Builds the kernels if stale (or forced); returns the .wasm path. Throws with asc's output on failure. */
export async function buildKernels({ force = false, quiet = true } = {}) {
  if (!force && !isStale()) return wasmPath;
  mkdirSync(dirname(wasmPath), { recursive: true });
  // A unique temporary name then rename: concurrent builds (parallel tests) never see half a file.
  const tmp = `${wasmPath}.${process.pid}.${Date.now()}.tmp`;
  const { default: asc } = await import('assemblyscript/asc');
  let errors = '';
  const sink = (collect) => ({ write: (s) => { if (collect) errors += String(s); return true; } });
  const { error } = await asc.main([join(wasmSourceDir, 'kernels.ts'), ...ascFlags, '-o', tmp], {
    stdout: sink(false),
    stderr: sink(true),
  });
  if (error) throw new Error(`asc failed to compile ${wasmSourceDir}: ${error.message}\n${errors}`);
  renameSync(tmp, wasmPath);
  if (!quiet) console.log(`built ${wasmPath}`);
  return wasmPath;
}

export const nativeDir = join(root, 'src', 'kernels', 'native');
export const nativeSource = join(nativeDir, 'kernels.c');
/** The C sources compiled together into the native library (headers: common.h). */
export const nativeSources = ['kernels.c', 'gemm-vnni.c', 'ops.c'].map((f) => join(nativeDir, f));
export const nativePath = join(root, 'build', 'native', 'kernels.so');

function newestNativeSource() {
  let newest = statSync(fileURLToPath(import.meta.url)).mtimeMs; // flags live here
  for (const name of readdirSync(nativeDir)) {
    if (name.endsWith('.c') || name.endsWith('.h')) newest = Math.max(newest, statSync(join(nativeDir, name)).mtimeMs);
  }
  return newest;
}

/**
 * Builds the native kernels if stale (or forced) with $CC (default cc); returns the shared
 * library's path. Throws when no compiler works: callers fall back to the wasm kernels.
 */
export async function buildNative({ force = false, quiet = true } = {}) {
  const out = statSync(nativePath, { throwIfNoEntry: false });
  if (!force && out && out.mtimeMs >= newestNativeSource()) return nativePath;
  mkdirSync(dirname(nativePath), { recursive: true });
  const tmp = `${nativePath}.${process.pid}.${Date.now()}.tmp`;
  const run = promisify(execFile);
  const cc = process.env.CC ?? 'cc';
  const args = ['-O3', '-shared', '-fPIC', '-o', tmp, ...nativeSources, '-lm'];
  try {
    await run(cc, ['-march=native', ...args], { timeout: 120_000 });
  } catch {
    await run(cc, args, { timeout: 120_000 });
  }
  renameSync(tmp, nativePath);
  if (!quiet) console.log(`built ${nativePath}`);
  return nativePath;
}
