import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import type { DType, DTypeArray } from './dtype.js';
import { reduceInto, type ReduceOp } from './reduce.js';
import { loadWasmReduce, type WasmReduce } from './reduce-wasm.js';

/**
 * The fast reductions of the collectives, reduce.ts's semantics bit for bit. First choice:
 * native C twins (reduce-native.c) of every dtype, compiled lazily on this machine and called
 * through koffi on the caller's typed arrays in place: a received fragment lives in a shared-
 * memory receive slot, which C reads directly. Where no C compiler works (a Mac without the
 * Command Line Tools) or with TANDEM_NATIVE_REDUCE=0: the WebAssembly SIMD kernels
 * (reduce-wasm.ts), which must copy both operands into their memory and the result out, and
 * still beat the TypeScript loop from the lengths in MIN_FAST*. Else, and for shorter arrays,
 * reduce.ts. On long arrays native is several times faster than wasm, and wasm several times
 * faster than reduce.ts (docs/collectives.md, "Fast kernels", has the table).
 */

type Kernel = (op: number, acc: DTypeArray, other: DTypeArray, n: number) => void;

/** The kernels reduceFast runs once loaded: native ones for every dtype, or the wasm reduction. */
type Fast =
  { path: 'native'; kernels: Readonly<Record<DType, Kernel>> } | { path: 'wasm'; reduce: WasmReduce };

/** Which implementation reduceFast runs for a given dtype and length (reducePath). */
export type ReducePath = 'native' | 'wasm' | 'ts';

const root = resolve(import.meta.dirname, '..', '..');
const source = join(import.meta.dirname, 'reduce-native.c');
const flags = ['-O3', '-march=native', '-fno-strict-aliasing', '-shared', '-fPIC'];
/**
 * Shortest arrays handed to a fast kernel: the lengths from which a kernel call, with its
 * fixed cost (and wasm's copies), beats the TypeScript loop for every op. f32/i32: from 256
 * elements (wasm overtakes reduce.ts between 128 and 256 depending on the op). f16/bf16, whose
 * TypeScript loop decodes and re-encodes every element and so costs several times more per
 * element: from 32. The per-call and per-element costs are in docs/collectives.md, "Fast
 * kernels".
 */
const MIN_FAST = 256;
const MIN_FAST_HALF = 32;

/** Whether `n` elements of `dtype` go to a fast kernel; the smallest threshold first, so tiny arrays cost one comparison. */
function worthFast(dtype: DType, n: number): boolean {
  return n >= MIN_FAST_HALF && (n >= MIN_FAST || dtype === 'f16' || dtype === 'bf16');
}

const opCode: Record<ReduceOp, number> = { sum: 0, max: 1, min: 2 };

let fast: Fast | undefined;
let loading: Promise<boolean> | undefined;
/** Why the native kernels are not in use (empty when they are). */
export let nativeReduceReason = 'not loaded yet';
/** Why the wasm kernels are not in use as the fallback (empty when they are, or when native ones are). */
export let wasmReduceReason = '';

/**
 * Loads the fast reductions: builds (once per source version) and loads the native kernels,
 * else the wasm ones. True when the native kernels run; reducePath says what runs.
 */
export function loadFastReduce(): Promise<boolean> {
  loading ??= (async () => {
    const kernels = await loadNative();
    if (kernels) {
      fast = { path: 'native', kernels };
      return true;
    }
    try {
      fast = { path: 'wasm', reduce: await loadWasmReduce() };
    } catch (e) {
      wasmReduceReason = `wasm reduce kernels unavailable: ${firstLine(e)}`;
    }
    return false;
  })();
  return loading;
}

async function loadNative(): Promise<Record<DType, Kernel> | undefined> {
  if (process.env.TANDEM_NATIVE_REDUCE === '0') {
    nativeReduceReason = 'disabled by TANDEM_NATIVE_REDUCE=0';
    return undefined;
  }
  try {
    const hash = createHash('sha256')
      .update(readFileSync(source))
      .update(flags.join(' '))
      .digest('hex')
      .slice(0, 12);
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
    const half = (name: string): Kernel =>
      l.func(`void ${name}(int op, uint16_t *acc, const uint16_t *other, int n)`) as Kernel;
    nativeReduceReason = '';
    return {
      f32: l.func('void tr_f32(int op, float *acc, const float *other, int n)') as Kernel,
      i32: l.func('void tr_i32(int op, int32_t *acc, const int32_t *other, int n)') as Kernel,
      f16: half('tr_f16'),
      bf16: half('tr_bf16'),
    };
  } catch (e) {
    nativeReduceReason = `native reduce kernels unavailable: ${firstLine(e)}`;
    return undefined;
  }
}

function firstLine(e: unknown): string {
  return ((e as Error).message.split('\n')[0] ?? '').slice(0, 200);
}

/** Whether reduceFast runs native code (after loadFastReduce resolved true). */
export function nativeReduceLoaded(): boolean {
  return fast?.path === 'native';
}

/** The implementation reduceFast runs for `n` elements of `dtype`, as loaded now. */
export function reducePath(dtype: DType, n: number): ReducePath {
  return fast && worthFast(dtype, n) ? fast.path : 'ts';
}

/** reduceInto (reduce.ts semantics, bit for bit) through the fastest kernel loaded for this dtype and length. */
export function reduceFast(op: ReduceOp, dtype: DType, acc: DTypeArray, other: DTypeArray): void {
  const n = acc.length;
  const f = fast;
  if (f && worthFast(dtype, n) && other.length >= n) {
    if (f.path === 'native') return f.kernels[dtype](opCode[op], acc, other, n);
    return f.reduce(op, dtype, acc, other);
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
export function sumTree(
  tree: SumTree,
  parts: readonly Float32Array[],
  out: Float32Array,
  spare: readonly Float32Array[],
): void {
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

function sumNode(
  node: SumTree,
  parts: readonly Float32Array[],
  dst: Float32Array,
  spare: readonly Float32Array[],
  depth: number,
): void {
  if (typeof node === 'number') {
    const part = parts[node] as Float32Array;
    if (part !== dst) dst.set(part.subarray(0, dst.length));
    return;
  }
  sumKids(node, 0, node.length, parts, dst, spare, depth);
}

function sumKids(
  kids: readonly SumTree[],
  lo: number,
  hi: number,
  parts: readonly Float32Array[],
  dst: Float32Array,
  spare: readonly Float32Array[],
  depth: number,
): void {
  if (hi - lo === 1) return sumNode(kids[lo] as SumTree, parts, dst, spare, depth);
  const half = halfOf(hi - lo);
  sumKids(kids, lo, lo + half, parts, dst, spare, depth);
  const right = kids[lo + half] as SumTree;
  if (hi - (lo + half) === 1 && typeof right === 'number') {
    reduceFast('sum', 'f32', dst, parts[right] as Float32Array);
    return;
  }
  const t = spare[depth];
  if (t === undefined || t.length < dst.length)
    throw new RangeError(`sumTree: a tree of ${kids.length} parts needs a spare buffer at depth ${depth}`);
  const tmp = t.subarray(0, dst.length);
  sumKids(kids, lo + half, hi, parts, tmp, spare, depth + 1);
  reduceFast('sum', 'f32', dst, tmp);
}
