import { readFile, mkdir, rename, stat } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TandemError } from '../../errors/index.js';
import type { Gemm } from './gemm.js';

/**
 * The WebAssembly SIMD twin of gemm.ts (wasm/train-gemm.ts, built into
 * build/wasm/train-gemm.wasm at first use). One thread on the module's own unshared memory:
 * each call copies its operands in, runs, and copies c out; the copies are O(m k + k n + m n)
 * against the product's O(m n k). The memory grows to the largest call and stays.
 */

interface GemmExports {
  memory: { buffer: ArrayBuffer; grow(pages: number): number };
  nt(a: number, b: number, c: number, m: number, n: number, k: number, acc: number): void;
  nn(a: number, b: number, c: number, m: number, n: number, k: number, acc: number): void;
  tn(a: number, b: number, c: number, m: number, n: number, k: number, acc: number): void;
}

interface WasmGlobal {
  compile(bytes: Uint8Array): Promise<object>;
  Instance: new (module: object, imports: object) => { exports: unknown };
}

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const source = join(root, 'src', 'kernels', 'wasm', 'train-gemm.ts');
export const trainGemmWasmPath = join(root, 'build', 'wasm', 'train-gemm.wasm');
/** Operands start past the first page: the stub runtime keeps its static data below it. */
const BASE = 65536;
const PAGE = 65536;

/** The part of assemblyscript/asc's API the build uses. */
interface AscMain {
  main(
    argv: string[],
    o: { stdout: { write(s: unknown): boolean }; stderr: { write(s: unknown): boolean } },
  ): Promise<{ error: Error | null }>;
}

async function build(): Promise<string> {
  const [src, out] = await Promise.all([stat(source), stat(trainGemmWasmPath).catch(() => undefined)]);
  if (out && out.mtimeMs >= src.mtimeMs) return trainGemmWasmPath;
  await mkdir(dirname(trainGemmWasmPath), { recursive: true });
  // a unique temporary then rename: concurrent builds never see half a file
  const tmp = `${trainGemmWasmPath}.${process.pid}.${Date.now()}.tmp`;
  // the specifier through a variable: the compiler's own declarations (which declare a
  // `console` namespace of their own) stay out of the program's types
  const ascModule = 'assemblyscript/asc';
  const { default: asc } = (await import(ascModule)) as { default: AscMain };
  let errors = '';
  const { error } = await asc.main(
    [source, '-O3', '--runtime', 'stub', '--noAssert', '--enable', 'simd', '-o', tmp],
    {
      stdout: { write: () => true },
      stderr: {
        write: (s: unknown) => {
          errors += String(s);
          return true;
        },
      },
    },
  );
  if (error)
    throw new TandemError('KERNELS_BUILD_FAILED', `asc failed to compile ${source}: ${error.message}`, {
      hint: `check that assemblyscript is installed (npm ci); asc said: ${errors.slice(0, 500)}`,
    });
  await rename(tmp, trainGemmWasmPath);
  return trainGemmWasmPath;
}

/** Builds train-gemm.wasm when stale and instantiates it. */
export async function loadWasmGemm(): Promise<Gemm> {
  const api = (globalThis as unknown as { WebAssembly: WasmGlobal }).WebAssembly;
  const module = await api.compile(await readFile(await build()));
  const ex = new api.Instance(module, {}).exports as GemmExports;
  let f32 = new Float32Array(ex.memory.buffer);

  /** Copies a and b in, runs `fn`, copies c out; offsets 64-byte aligned. */
  const call = (
    fn: GemmExports['nt'],
    a: Float32Array,
    b: Float32Array,
    c: Float32Array,
    m: number,
    n: number,
    k: number,
    aLen: number,
    bLen: number,
    acc: boolean,
  ): void => {
    const align = (x: number): number => (x + 63) & ~63;
    const pa = BASE;
    const pb = align(pa + aLen * 4);
    const pc = align(pb + bLen * 4);
    const end = pc + m * n * 4;
    const have = ex.memory.buffer.byteLength;
    if (end > have) ex.memory.grow(Math.ceil((end - have) / PAGE));
    if (f32.buffer !== ex.memory.buffer || f32.length * 4 < end) f32 = new Float32Array(ex.memory.buffer);
    f32.set(a.subarray(0, aLen), pa / 4);
    f32.set(b.subarray(0, bLen), pb / 4);
    if (acc) f32.set(c.subarray(0, m * n), pc / 4);
    fn(pa, pb, pc, m, n, k, acc ? 1 : 0);
    c.set(f32.subarray(pc / 4, pc / 4 + m * n));
  };
  return {
    name: 'wasm',
    nt: (a, b, c, m, n, k, acc = false) => call(ex.nt, a, b, c, m, n, k, m * k, n * k, acc),
    nn: (a, b, c, m, n, k, acc = false) => call(ex.nn, a, b, c, m, n, k, m * k, k * n, acc),
    tn: (a, b, c, m, n, k, acc = false) => call(ex.tn, a, b, c, m, n, k, k * m, k * n, acc),
  };
}
