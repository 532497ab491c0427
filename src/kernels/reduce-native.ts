import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import type { DType, DTypeArray } from './dtype.js';
import { reduceInto, type ReduceOp } from './reduce.js';

/**
 * The fast reductions of the collectives: native C twins (reduce-native.c) of reduce.ts's f32
 * and i32 kernels, compiled lazily on this machine and called through koffi on the caller's
 * typed arrays in place. Native rather than WebAssembly because a wasm kernel can only read
 * its own linear memory: every reduction of a received fragment (which lives in a shared-
 * memory receive slot) would first be copied in and the result copied out, which costs more
 * than the reduction itself; koffi hands C the typed array's own pointer. Measured here:
 * 128 Ki f32 sums 30 us native vs 490 us in the TypeScript loop. Without a C compiler (or
 * with TANDEM_NATIVE_REDUCE=0) everything runs in reduce.ts; f16/bf16 always do.
 */

type Kernel = (op: number, acc: DTypeArray, other: DTypeArray, n: number) => void;

const root = resolve(import.meta.dirname, '..', '..');
const source = join(import.meta.dirname, 'reduce-native.c');
const flags = ['-O3', '-march=native', '-fno-strict-aliasing', '-shared', '-fPIC'];
/** Below this many elements the FFI call (~0.2 us) costs more than the loop it replaces. */
const MIN_NATIVE = 256;
const opCode: Record<ReduceOp, number> = { sum: 0, max: 1, min: 2 };

let f32: Kernel | undefined;
let i32: Kernel | undefined;
let loading: Promise<boolean> | undefined;
/** Why the native kernels are not in use (empty when they are). */
export let nativeReduceReason = 'not loaded yet';

/** Builds (once per source version) and loads the native kernels; false when impossible here. */
export function loadNativeReduce(): Promise<boolean> {
  loading ??= (async () => {
    if (process.env.TANDEM_NATIVE_REDUCE === '0') {
      nativeReduceReason = 'disabled by TANDEM_NATIVE_REDUCE=0';
      return false;
    }
    try {
      const hash = createHash('sha256').update(readFileSync(source)).update(flags.join(' ')).digest('hex').slice(0, 12);
      const lib = join(root, 'build', 'native', `reduce-${hash}.so`);
      if (!existsSync(lib)) {
        mkdirSync(dirname(lib), { recursive: true });
        // a unique temporary name, then rename: concurrent builds never load half a file
        const tmp = `${lib}.${process.pid}.${Date.now()}.tmp`;
        await promisify(execFile)(process.env.CC ?? 'cc', [...flags, '-o', tmp, source], { timeout: 60_000 });
        renameSync(tmp, lib);
      }
      const { default: koffi } = await import('koffi');
      const l = koffi.load(lib);
      f32 = l.func('void tr_f32(int op, float *acc, const float *other, int n)') as Kernel;
      i32 = l.func('void tr_i32(int op, int32_t *acc, const int32_t *other, int n)') as Kernel;
      nativeReduceReason = '';
      return true;
    } catch (e) {
      nativeReduceReason = `native reduce kernels unavailable: ${((e as Error).message.split('\n')[0] ?? '').slice(0, 200)}`;
      return false;
    }
  })();
  return loading;
}

/** Whether reduceFast runs native code for f32/i32 (after loadNativeReduce resolved true). */
export function nativeReduceLoaded(): boolean {
  return f32 !== undefined;
}

/** reduceInto (reduce.ts semantics, bit for bit) through the native kernel when it is loaded. */
export function reduceFast(op: ReduceOp, dtype: DType, acc: DTypeArray, other: DTypeArray): void {
  const n = acc.length;
  if (n >= MIN_NATIVE && other.length >= n) {
    if (dtype === 'f32' && f32) return f32(opCode[op], acc, other, n);
    if (dtype === 'i32' && i32) return i32(opCode[op], acc, other, n);
  }
  reduceInto(op, dtype, acc, other);
}

/**
 * out = the sum of `parts` in a fixed pairwise tree: the first half (the largest power of two
 * below the count) and the rest are summed alike and then added, so 4 parts are (p0 + p1) +
 * (p2 + p3). A run of parts that is a whole subtree of a larger tree sums to the same bits in
 * both, and IEEE addition commutes, so ranks that hold different subtrees (or the halves of
 * one pair) get bit-identical totals: the order tensor-parallel sums are pinned to (see
 * docs/parallel.md, "Exact tensor parallel"). `out` may be parts[0] and nothing else;
 * `spare` needs treeSpares(parts.length) buffers of out's length at least.
 */
export function treeSum(parts: readonly Float32Array[], out: Float32Array, spare: readonly Float32Array[]): void {
  sumRange(parts, 0, parts.length, out, spare, 0);
}

/** Spare buffers treeSum needs for `parts` parts: one per level below the top. */
export function treeSpares(parts: number): number {
  return Math.max(0, Math.ceil(Math.log2(parts)) - 1);
}

function sumRange(parts: readonly Float32Array[], lo: number, hi: number, dst: Float32Array, spare: readonly Float32Array[], depth: number): void {
  const n = dst.length;
  if (hi - lo === 1) {
    if (parts[lo] !== dst) dst.set((parts[lo] as Float32Array).subarray(0, n));
    return;
  }
  let half = 1;
  while (2 * half < hi - lo) half *= 2;
  sumRange(parts, lo, lo + half, dst, spare, depth);
  if (hi - (lo + half) === 1) {
    reduceFast('sum', 'f32', dst, parts[lo + half] as Float32Array);
    return;
  }
  const t = spare[depth];
  if (t === undefined || t.length < n) throw new RangeError(`treeSum: ${hi - lo} parts need a spare buffer at depth ${depth}`);
  const tmp = t.subarray(0, n);
  sumRange(parts, lo + half, hi, tmp, spare, depth + 1);
  reduceFast('sum', 'f32', dst, tmp);
}
