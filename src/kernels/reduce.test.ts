import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fromNumbers, toNumbers, toF16, toBf16, dtypes, type DType } from './dtype.js';
import { divideInPlace, reduceInto, reduceOps, type ReduceOp } from './reduce.js';

function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
}

/** The expected result computed independently: float64 arithmetic, one rounding per step. */
function expected(op: ReduceOp, dtype: DType, a: number, b: number): number {
  const r = op === 'sum' ? a + b : op === 'max' ? Math.max(a, b) : Math.min(a, b);
  switch (dtype) {
    case 'f32':
      return Math.fround(r);
    case 'f16':
      return toNumbers('f16', Uint16Array.of(toF16(r)))[0] as number;
    case 'bf16':
      return toNumbers('bf16', Uint16Array.of(toBf16(r)))[0] as number;
    case 'i32':
      return r | 0;
  }
}

test('reduceInto matches float64 arithmetic rounded once, for every dtype and op', () => {
  for (const dtype of dtypes) {
    for (const op of reduceOps) {
      const rand = lcg(7);
      const gen = (): number =>
        dtype === 'i32' ? Math.floor((rand() - 0.5) * 2 ** 32) : (rand() - 0.5) * 2 ** (rand() * 30 - 10);
      const xs = Array.from({ length: 1000 }, gen);
      const ys = Array.from({ length: 1000 }, gen);
      const a = fromNumbers(dtype, xs);
      const b = fromNumbers(dtype, ys);
      const av = toNumbers(dtype, a);
      const bv = toNumbers(dtype, b);
      reduceInto(op, dtype, a, b);
      const got = toNumbers(dtype, a);
      for (let i = 0; i < xs.length; i++) {
        assert.equal(got[i], expected(op, dtype, av[i] as number, bv[i] as number), `${dtype} ${op} #${i}`);
      }
    }
  }
});

test('reduceInto is commutative bit for bit (so a fixed order is enough for identical ranks)', () => {
  for (const dtype of dtypes) {
    const rand = lcg(99);
    const xs = Array.from({ length: 500 }, () => (rand() - 0.5) * 1000);
    const ys = Array.from({ length: 500 }, () => (rand() - 0.5) * 1000);
    const ab = fromNumbers(dtype, xs);
    const ba = fromNumbers(dtype, ys);
    reduceInto('sum', dtype, ab, fromNumbers(dtype, ys));
    reduceInto('sum', dtype, ba, fromNumbers(dtype, xs));
    assert.deepEqual([...ab], [...ba], dtype);
  }
});

test('i32 sum wraps; NaN propagates through max; +0 beats -0', () => {
  const a = Int32Array.of(2 ** 31 - 1);
  reduceInto('sum', 'i32', a, Int32Array.of(1));
  assert.equal(a[0], -(2 ** 31));
  const f = Float32Array.of(NaN, -0);
  reduceInto('max', 'f32', f, Float32Array.of(1, 0));
  assert.ok(Number.isNaN(f[0]));
  assert.ok(Object.is(f[1], 0));
  const h = fromNumbers('f16', [65504]);
  reduceInto('sum', 'f16', h, fromNumbers('f16', [65504]));
  assert.equal(toNumbers('f16', h)[0], Infinity);
});

test('divideInPlace gives the mean per dtype', () => {
  const f = Float32Array.of(3, -9);
  divideInPlace('f32', f, 3);
  assert.deepEqual([...f], [1, -3]);
  const i = Int32Array.of(7, -7);
  divideInPlace('i32', i, 2);
  assert.deepEqual([...i], [3, -3]);
  const h = fromNumbers('bf16', [6]);
  divideInPlace('bf16', h, 4);
  assert.deepEqual([...toNumbers('bf16', h)], [1.5]);
});
