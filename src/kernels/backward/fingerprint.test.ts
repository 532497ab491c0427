import { test } from 'node:test';
import assert from 'node:assert/strict';
import { seeded } from './finite-diff.js';
import { FINGERPRINT_LANES, fingerprint } from './fingerprint.js';
import { loadNativeGemm } from './gemm-native.js';

function of(x: Float32Array, fp: (x: Float32Array, out: Uint32Array) => void = fingerprint): string {
  const out = new Uint32Array(FINGERPRINT_LANES);
  fp(x, out);
  return Buffer.from(out.buffer).toString('hex');
}

test('the native fingerprint is the TypeScript one bit for bit, at every length around a block', async () => {
  const native = (await loadNativeGemm(1)).ops!;
  const x = seeded(70_001, 41);
  for (const n of [0, 1, 15, 16, 17, 33, 1000, 70_001])
    assert.equal(of(x.subarray(0, n), native.fingerprint), of(x.subarray(0, n)), `length ${n}`);
  // a view at an offset reads its own elements only
  assert.equal(of(x.subarray(5, 1005), native.fingerprint), of(x.slice(5, 1005)));
});

test('one changed bit anywhere, a swap of two elements or another length changes the fingerprint', () => {
  const x = seeded(1000, 42);
  const base = of(x);
  const bits = new Uint32Array(x.buffer);
  for (const [i, bit] of [
    [0, 0],
    [17, 31],
    [999, 12],
  ] as const) {
    const y = new Uint32Array(bits);
    y[i] = (y[i] as number) ^ (1 << bit);
    assert.notEqual(of(new Float32Array(y.buffer)), base, `element ${i} bit ${bit}`);
  }
  // the same values in two lanes' places, and two sign flips in one lane, both change it
  const swapped = x.slice();
  [swapped[3], swapped[4]] = [x[4]!, x[3]!];
  assert.notEqual(of(swapped), base);
  const flips = x.slice();
  flips[3] = -x[3]!;
  flips[19] = -x[19]!;
  assert.notEqual(of(flips), base);
  assert.notEqual(of(x.subarray(0, 999)), base);
  assert.equal(of(x.slice()), base);
});
