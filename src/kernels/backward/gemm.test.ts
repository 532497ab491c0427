import { test } from 'node:test';
import assert from 'node:assert/strict';
import { referenceGemm, type Gemm } from './gemm.js';
import { loadWasmGemm } from './gemm-wasm.js';
import { loadNativeGemm } from './gemm-native.js';

function random(n: number, seed: number): Float32Array {
  let s = seed >>> 0 || 1;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    out[i] = ((s >>> 0) / 2 ** 32) * 2 - 1;
  }
  return out;
}

/** Largest |x - y| over max |y|: f32 sums of k products against f64 ones differ by ~k ulps. */
function relDiff(x: Float32Array, y: Float32Array): number {
  let d = 0;
  let m = 0;
  for (let i = 0; i < y.length; i++) {
    d = Math.max(d, Math.abs((x[i] as number) - (y[i] as number)));
    m = Math.max(m, Math.abs(y[i] as number));
  }
  return d / m;
}

interface ProductCase {
  op: 'nt' | 'nn' | 'tn';
  acc: boolean;
  a: Float32Array;
  b: Float32Array;
  c0: Float32Array;
  m: number;
  n: number;
  k: number;
}

/** Every product (nt, nn, tn; with and without accumulation) of each shape on seeded inputs, with the reference's answer. */
function eachProduct(
  shapes: readonly (readonly [number, number, number])[],
  check: (c: ProductCase, want: Float32Array, label: string) => void,
): void {
  for (const [m, n, k] of shapes) {
    const a = random(Math.max(m, k) * Math.max(k, m), m * 1000 + k);
    const b = random(Math.max(n, k) * Math.max(k, n), n * 77 + k);
    const c0 = random(m * n, 5);
    for (const op of ['nt', 'nn', 'tn'] as const) {
      for (const acc of [false, true]) {
        const want = c0.slice();
        referenceGemm[op](a, b, want, m, n, k, acc);
        check({ op, acc, a, b, c0, m, n, k }, want, `${op} ${m}x${n}x${k} acc=${acc}`);
      }
    }
  }
}

test('the wasm GEMMs match the reference twin on odd shapes, with and without accumulation', async () => {
  const wasm: Gemm = await loadWasmGemm();
  eachProduct(
    [
      [1, 1, 1],
      [3, 5, 7],
      [8, 12, 16],
      [17, 33, 65],
      [64, 48, 130],
    ],
    (c, want, label) => {
      const got = c.c0.slice();
      wasm[c.op](c.a, c.b, got, c.m, c.n, c.k, c.acc);
      assert.ok(relDiff(got, want) < 1e-5, `${label}: ${relDiff(got, want)}`);
    },
  );
});

test('the three products agree with each other through transposes', () => {
  const [m, n, k] = [4, 3, 5];
  const a = random(m * k, 1);
  const b = random(n * k, 2);
  const bt = new Float32Array(k * n);
  for (let j = 0; j < n; j++) for (let p = 0; p < k; p++) bt[p * n + j] = b[j * k + p] as number;
  const at = new Float32Array(k * m);
  for (let i = 0; i < m; i++) for (let p = 0; p < k; p++) at[p * m + i] = a[i * k + p] as number;
  const c1 = new Float32Array(m * n);
  const c2 = new Float32Array(m * n);
  const c3 = new Float32Array(m * n);
  referenceGemm.nt(a, b, c1, m, n, k);
  referenceGemm.nn(a, bt, c2, m, n, k);
  referenceGemm.tn(at, bt, c3, m, n, k);
  assert.deepEqual(c2, c1);
  assert.deepEqual(c3, c1);
});

test('the native GEMMs match the reference twin on odd shapes, and give the same bits on 1 and 3 threads', async () => {
  const one = await loadNativeGemm(1);
  const three = await loadNativeGemm(3);
  eachProduct(
    [
      [1, 1, 1],
      [3, 5, 7],
      [7, 33, 16],
      [17, 65, 65],
      [64, 100, 130],
    ],
    (c, want, label) => {
      const got = c.c0.slice();
      const got3 = c.c0.slice();
      one[c.op](c.a, c.b, got, c.m, c.n, c.k, c.acc);
      three[c.op](c.a, c.b, got3, c.m, c.n, c.k, c.acc);
      assert.ok(relDiff(got, want) < 1e-5, `${label}: ${relDiff(got, want)}`);
      assert.deepEqual(got3, got, `${label}: 3 threads differ from 1`);
    },
  );
});
