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
 * A fixed order of summation: a part's index, or a node whose children are added pairwise: the
 * first half (the largest power of two below the count) and the rest are summed alike and
 * then added, so 4 children are (c0 + c1) + (c2 + c3). A subtree sums to the same bits alone
 * or inside the whole, and IEEE addition commutes, so ranks that hold different subtrees (or
 * the halves of one pair) get bit-identical totals: the order tensor-parallel sums are
 * pinned to (see src/engine/model/leaves.ts and docs/parallel.md, "Exact tensor parallel").
 */
export type SumTree = number | readonly SumTree[];

const flatTrees: SumTree[] = [];

/** The flat tree over parts 0..n-1: (p0 + p1) + (p2 + p3) for 4. */
export function flatTree(n: number): SumTree {
  return (flatTrees[n] ??= Array.from({ length: n }, (_, i) => i));
}

/**
 * out = the sum of `parts` in the order of `tree` (every index of `parts` it names once).
 * `out` may be the tree's first (leftmost) part and no other; `spare` needs treeSpares(tree)
 * buffers of out's length at least.
 */
export function sumTree(tree: SumTree, parts: readonly Float32Array[], out: Float32Array, spare: readonly Float32Array[]): void {
  sumNode(tree, parts, out, spare, 0);
}

/** Spare buffers sumTree needs for `tree`. */
export function treeSpares(tree: SumTree): number {
  return typeof tree === 'number' ? 0 : sparesOf(tree, 0, tree.length, 0);
}

function sparesOf(kids: readonly SumTree[], lo: number, hi: number, depth: number): number {
  if (hi - lo === 1) {
    const only = kids[lo] as SumTree;
    return typeof only === 'number' ? 0 : sparesOf(only, 0, only.length, depth);
  }
  const half = halfOf(hi - lo);
  const left = sparesOf(kids, lo, lo + half, depth);
  if (hi - (lo + half) === 1 && typeof kids[lo + half] === 'number') return left;
  return Math.max(left, depth + 1, sparesOf(kids, lo + half, hi, depth + 1));
}

/** The largest power of two below n (n >= 2). */
function halfOf(n: number): number {
  let half = 1;
  while (2 * half < n) half *= 2;
  return half;
}

function sumNode(node: SumTree, parts: readonly Float32Array[], dst: Float32Array, spare: readonly Float32Array[], depth: number): void {
  if (typeof node === 'number') {
    const part = parts[node] as Float32Array;
    if (part !== dst) dst.set(part.subarray(0, dst.length));
    return;
  }
  sumKids(node, 0, node.length, parts, dst, spare, depth);
}

function sumKids(kids: readonly SumTree[], lo: number, hi: number, parts: readonly Float32Array[], dst: Float32Array, spare: readonly Float32Array[], depth: number): void {
  if (hi - lo === 1) return sumNode(kids[lo] as SumTree, parts, dst, spare, depth);
  const half = halfOf(hi - lo);
  sumKids(kids, lo, lo + half, parts, dst, spare, depth);
  const right = kids[lo + half] as SumTree;
  if (hi - (lo + half) === 1 && typeof right === 'number') {
    reduceFast('sum', 'f32', dst, parts[right] as Float32Array);
    return;
  }
  const t = spare[depth];
  if (t === undefined || t.length < dst.length) throw new RangeError(`sumTree: a tree of ${kids.length} parts needs a spare buffer at depth ${depth}`);
  const tmp = t.subarray(0, dst.length);
  sumKids(kids, lo + half, hi, parts, tmp, spare, depth + 1);
  reduceFast('sum', 'f32', dst, tmp);
}
