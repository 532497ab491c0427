import { test } from 'node:test';
import assert from 'node:assert/strict';
import { q8BlockSize, q8Bytes, q8Pack, q8Unpack, q8UnpackAdd } from './q8.js';

function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
}

test('q8 round trip stays within max|x|/254 per block, for counts that are not multiples of 32', () => {
  const rand = lcg(3);
  for (const n of [0, 1, 7, 31, 32, 33, 4096, 10007]) {
    const x = new Float32Array(n);
    for (let i = 0; i < n; i++) x[i] = (rand() - 0.5) * 2 ** (((i >> 5) % 12) - 4);
    const packed = new Uint8Array(q8Bytes(n));
    q8Pack(x, packed);
    const y = new Float32Array(n);
    q8Unpack(packed, y);
    for (let b = 0; b * q8BlockSize < n; b++) {
      const block = x.subarray(b * q8BlockSize, (b + 1) * q8BlockSize);
      const max = Math.max(...block.map(Math.abs));
      for (let i = b * q8BlockSize; i < Math.min(n, (b + 1) * q8BlockSize); i++) {
        assert.ok(
          Math.abs((y[i] as number) - (x[i] as number)) <= (max / 254) * 1.0001 + 1e-30,
          `n=${n} i=${i}`,
        );
      }
    }
  }
});

test('q8 size is 4 bytes per block plus one per value; zeros stay zero; unpackAdd adds', () => {
  assert.equal(q8Bytes(0), 0);
  assert.equal(q8Bytes(1), 5);
  assert.equal(q8Bytes(64), 72);
  const x = new Float32Array(40);
  x[35] = -2;
  const p = new Uint8Array(q8Bytes(40));
  q8Pack(x, p);
  const acc = new Float32Array(40).fill(1);
  q8UnpackAdd(p, acc);
  assert.equal(acc[0], 1);
  assert.equal(acc[35], -1);
  const y = Float32Array.from({ length: 40 }, (_, i) => Math.sin(i) * 3);
  const py = new Uint8Array(q8Bytes(40));
  q8Pack(y, py);
  const viaAdd = Float32Array.from({ length: 40 }, (_, i) => Math.cos(i));
  const viaUnpack = new Float32Array(40);
  q8Unpack(py, viaUnpack);
  for (let i = 0; i < 40; i++) viaUnpack[i] = Math.fround(Math.cos(i)) + viaUnpack[i]!;
  q8UnpackAdd(py, viaAdd);
  assert.deepEqual(viaAdd, viaUnpack, 'unpackAdd == unpack then f32 add, bit for bit');
});

test('q8 measured error on gaussian-like activations is documented (rms/maxabs < 0.25%)', () => {
  const rand = lcg(11);
  const n = 1 << 16;
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = rand() + rand() + rand() - 1.5;
  const p = new Uint8Array(q8Bytes(n));
  q8Pack(x, p);
  const y = new Float32Array(n);
  q8Unpack(p, y);
  let se = 0;
  let maxAbs = 0;
  for (let i = 0; i < n; i++) {
    se += ((y[i] as number) - (x[i] as number)) ** 2;
    maxAbs = Math.max(maxAbs, Math.abs(x[i] as number));
  }
  const rms = Math.sqrt(se / n);
  assert.ok(rms / maxAbs < 0.0025, `rms ${rms} vs max ${maxAbs}`);
});
