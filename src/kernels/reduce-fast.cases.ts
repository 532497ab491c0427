import { test } from 'node:test';
import assert from 'node:assert/strict';
import { allocate, type DType, type DTypeArray } from './dtype.js';
import { reduceInto, reduceOps, type ReduceOp } from './reduce.js';

/**
 * The conformance suite of every fast reduction kernel (native C, WebAssembly): its results
 * against reduce.ts's, bit for bit, on random bit patterns with special values mixed in, odd
 * lengths and typed-array views at unaligned element offsets; for f16/bf16 every one of the
 * 65536 patterns against a sample of partners (random, special, neighbouring, negated). The
 * one freedom IEEE leaves, which payload a sum of two NaNs keeps, is only required to be a
 * NaN (f32; f16/bf16 results are canonicalised anyway).
 */
export type FastReduce = (op: ReduceOp, dtype: DType, acc: DTypeArray, other: DTypeArray) => void;

/** A kernel to test, or the reason it cannot run here (the tests skip with it). */
export type LoadKernel = () => Promise<FastReduce | string>;

export function xorshift(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return s >>> 0;
  };
}

/** NaNs of several payloads and both signs, infinities, +-0, subnormals, extremes, 1. */
const specials: Readonly<Record<DType, readonly number[]>> = {
  f32: [
    0x7fc00000, 0xffc00000, 0x7fa00001, 0x7f800000, 0xff800000, 0, 0x80000000, 1, 0x80000001, 0x7f7fffff,
    0x00800000, 0x3f800000,
  ],
  i32: [0, -1, 1, 0x7fffffff, -0x80000000],
  f16: [
    0x7e00, 0xfe00, 0x7c01, 0x7fff, 0x7c00, 0xfc00, 0, 0x8000, 1, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff,
    0x3c00, 0x3c01,
  ],
  bf16: [
    0x7fc0, 0xffc0, 0x7f81, 0x7fff, 0x7f80, 0xff80, 0, 0x8000, 1, 0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f,
    0x3f80, 0x3f81,
  ],
};

/** Bits of the dtype's element width (the i32 view holds them as signed numbers). */
function bitsOf(data: DTypeArray): Uint32Array | Uint16Array | Int32Array {
  return data instanceof Float32Array ? new Uint32Array(data.buffer, data.byteOffset, data.length) : data;
}

/** n random elements of `dtype` (as bits), 3 in 16 special; with a partner, 1 in 16 equal to it. */
function randomBits(dtype: DType, rand: () => number, n: number, partner?: DTypeArray): DTypeArray {
  const out = allocate(dtype, n);
  const bits = bitsOf(out);
  const sp = specials[dtype];
  const pb = partner && bitsOf(partner);
  for (let i = 0; i < n; i++) {
    const r = rand() % 16;
    if (r < 3) bits[i] = sp[rand() % sp.length] as number;
    else if (r === 3 && pb) bits[i] = pb[i] as number;
    else bits[i] = dtype === 'i32' ? rand() | 0 : rand();
  }
  return out;
}

/** Runs `kernel` and reduce.ts on copies of `acc` and asserts equal bits. */
function compare(
  kernel: FastReduce,
  op: ReduceOp,
  dtype: DType,
  acc: DTypeArray,
  other: DTypeArray,
  what: string,
): void {
  const ref = acc.slice();
  const got = acc.slice();
  reduceInto(op, dtype, ref, other);
  kernel(op, dtype, got, other);
  const rb = bitsOf(ref);
  const gb = bitsOf(got);
  const ab = bitsOf(acc);
  const ob = bitsOf(other);
  for (let i = 0; i < acc.length; i++) {
    if (gb[i] === rb[i]) continue;
    // two NaN operands of an f32 sum: either payload is IEEE-correct (V8 and C differ in operand order)
    const bothNaN = dtype === 'f32' && Number.isNaN(acc[i]) && Number.isNaN(other[i]);
    if (op === 'sum' && bothNaN && Number.isNaN(got[i])) continue;
    const hex = (v: number | undefined): string => ((v ?? 0) >>> 0).toString(16);
    assert.fail(
      `${what} ${dtype} ${op} #${i}: ${hex(ab[i])} (op) ${hex(ob[i])} gave ${hex(gb[i])}, reduce.ts ${hex(rb[i])}`,
    );
  }
}

/** `n` elements of `dtype` at element offset `offset` of a fresh buffer (unaligned for offset % 4 != 0). */
function offsetView(dtype: DType, src: DTypeArray, offset: number): DTypeArray {
  const whole = allocate(dtype, src.length + offset);
  const view = whole.subarray(offset) as DTypeArray;
  bitsOf(view).set(bitsOf(src));
  return view;
}

/**
 * Registers the suite for `name`. `lengths`: the odd lengths to try; they should cross the
 * kernel's chunk or vector boundaries and stay at or above any threshold under which the
 * kernel's caller falls back to reduce.ts.
 */
export function reduceConformance(name: string, load: LoadKernel, lengths: readonly number[]): void {
  for (const dtype of ['f32', 'i32', 'f16', 'bf16'] as const) {
    test(`${name}: ${dtype} sum/max/min equal reduce.ts bit for bit (random bits and special values; odd lengths, unaligned offsets)`, async (t) => {
      const kernel = await load();
      if (typeof kernel === 'string') return t.skip(kernel);
      const rand = xorshift(12345 + dtype.length);
      for (const op of reduceOps) {
        for (const n of lengths) {
          for (const offset of [0, 1, 3]) {
            const other = offsetView(dtype, randomBits(dtype, rand, n), offset);
            const acc = offsetView(dtype, randomBits(dtype, rand, n, other), offset);
            compare(kernel, op, dtype, acc, other, `${name} n=${n} offset=${offset}`);
          }
        }
      }
    });
  }
  for (const dtype of ['f16', 'bf16'] as const) {
    test(`${name}: ${dtype} every bit pattern against random, special, neighbouring and negated partners`, async (t) => {
      const kernel = await load();
      if (typeof kernel === 'string') return t.skip(kernel);
      const rand = xorshift(99);
      const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
      const partners: Uint16Array[] = specials[dtype].map((s) => new Uint16Array(65536).fill(s));
      for (let k = 0; k < 48; k++) partners.push(randomBits(dtype, rand, 65536) as Uint16Array);
      for (const d of [1, 2, 3]) partners.push(all.map((v) => v + d)); // neighbours (wrapping)
      for (const x of [0x8000, 0x8001]) partners.push(all.map((v) => v ^ x)); // negated, negated neighbour
      for (const op of reduceOps) {
        for (const p of partners) {
          compare(kernel, op, dtype, all, p, `${name} all patterns`);
          compare(kernel, op, dtype, p, all, `${name} all patterns (other side)`);
        }
      }
    });
  }
}
