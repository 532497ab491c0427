import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ReferenceKernels } from './reference.js';
import { GgmlType, type GgmlTypeId } from './types.js';
import { f32ToF16, f16ToF32, f32ToBf16, bf16ToF32 } from './half.js';
import { dequantRow } from './ref/quant-ref.js';
import { randomFloats, randomWeightBytes } from './testing/random-weights.js';
import { isTandemError } from '../errors/index.js';
import { llama3FreqFactors } from './rope.js';

const types: [string, GgmlTypeId][] = Object.entries(GgmlType);

test('f16 and bf16 conversions round to nearest even', () => {
  assert.equal(f32ToF16(1), 0x3c00);
  assert.equal(f32ToF16(-2), 0xc000);
  assert.equal(f32ToF16(65504), 0x7bff);
  assert.equal(f32ToF16(1e6), 0x7c00);
  assert.equal(f16ToF32(0x0001), 2 ** -24);
  assert.equal(f32ToF16(2 ** -24), 0x0001);
  assert.equal(f32ToF16(1 + 2 ** -11), 0x3c00); // tie -> even
  assert.equal(f32ToF16(1 + 3 * 2 ** -11), 0x3c02); // tie -> even (up)
  for (let h = 0; h < 0x7c00; h += 7) assert.equal(f32ToF16(f16ToF32(h)), h);
  assert.equal(f32ToBf16(1), 0x3f80);
  assert.equal(bf16ToF32(0x4049), 3.140625);
});

test('Q8_0 and Q4_0 blocks dequantise as ggml defines them', () => {
  const q8 = new Uint8Array(34);
  q8[0] = 0x00;
  q8[1] = 0x38; // d = 0.5
  for (let i = 0; i < 32; i++) q8[2 + i] = (i - 16) & 0xff;
  const out = new Float32Array(32);
  dequantRow(GgmlType.Q8_0, q8, 0, 32, out);
  assert.equal(out[0], -8);
  assert.equal(out[31], 7.5);
  const q4 = new Uint8Array(18);
  q4[1] = 0x3c; // d = 1
  q4[2] = 0xf0; // element 0: 0 - 8, element 16: 15 - 8
  dequantRow(GgmlType.Q4_0, q4, 0, 32, out);
  assert.equal(out[0], -8);
  assert.equal(out[16], 7);
});

test('Q4_K unpacks its 6-bit scales and mins for both halves of the sub-blocks', () => {
  const b = new Uint8Array(144);
  b[1] = 0x3c; // d = 1
  b[3] = 0x3c; // dmin = 1
  // sub-block 0: scale 3, min 2; sub-block 5: scale 0x15 | (1<<4) from the top bits.
  b[4] = 3;
  b[8] = 2;
  b[4 + 1] = 1 << 6; // high bits of scale for j = 5
  b[4 + 9] = 0x05 | (0x07 << 4); // j = 5: low scale 5, low min 7
  b[4 + 5] = 2 << 6; // high bits of min for j = 5
  for (let i = 0; i < 128; i++) b[16 + i] = 0x21; // low nibble 1, high nibble 2
  const out = new Float32Array(256);
  dequantRow(GgmlType.Q4_K, b, 0, 256, out);
  assert.equal(out[0], 3 * 1 - 2);
  // j = 5 is the high nibbles of the third 32-byte group: elements 160..191.
  assert.equal(out[160], (5 | (1 << 4)) * 2 - (7 | (2 << 4)));
});

test('reference matvec agrees with dequantised weights times x for every type', () => {
  const k = new ReferenceKernels();
  const rows = 5;
  const cols = 512;
  for (const [name, type] of types) {
    const data = randomWeightBytes(type, rows, cols, 11);
    const w = k.uploadWeight({ type, rows, cols, data, name });
    const x = randomFloats(cols, 3);
    const y = new Float32Array(rows);
    k.matvec(w, x, y);
    const row = new Float32Array(cols);
    for (let r = 0; r < rows; r++) {
      k.embedRow(w, r, row);
      let want = 0;
      let mag = 0;
      for (let c = 0; c < cols; c++) {
        want += (row[c] as number) * (x[c] as number);
        mag += Math.abs((row[c] as number) * (x[c] as number));
      }
      // x is quantised to 8 bits (or f16/bf16) first: error well under 2% of the magnitude.
      assert.ok(
        Math.abs((y[r] as number) - want) <= 0.02 * mag + 1e-6,
        `${name} row ${r}: ${y[r]} vs ${want}`,
      );
    }
  }
});

test('row and column slices pick the right part of a tensor', () => {
  const k = new ReferenceKernels();
  const data = randomWeightBytes(GgmlType.Q8_0, 6, 128, 5);
  const full = k.uploadWeight({ type: GgmlType.Q8_0, rows: 6, cols: 128, data });
  const part = k.uploadWeight({
    type: GgmlType.Q8_0,
    rows: 6,
    cols: 128,
    data,
    rowStart: 2,
    rowCount: 3,
    colStart: 64,
    colCount: 64,
  });
  assert.equal(part.rows, 3);
  assert.equal(part.cols, 64);
  const a = new Float32Array(128);
  const b = new Float32Array(64);
  k.embedRow(full, 3, a);
  k.embedRow(part, 1, b);
  assert.deepEqual(b, a.subarray(64));
  assert.throws(
    () => k.uploadWeight({ type: GgmlType.Q8_0, rows: 6, cols: 128, data, colStart: 16 }),
    (e) => isTandemError(e, 'KERNELS_BAD_SLICE'),
  );
  assert.throws(
    () => k.uploadWeight({ type: GgmlType.Q4_K, rows: 1, cols: 100, data }),
    (e) => isTandemError(e, 'KERNELS_BAD_SHAPE'),
  );
});

test('rope rotates adjacent pairs (normal) or halves (neox) by pos * base^(-2i/d)', () => {
  const k = new ReferenceKernels();
  const x = new Float32Array([1, 0, 1, 0]);
  k.rope(x, new Int32Array([1]), 1, { headDim: 4, style: 'normal', freqBase: 10000 });
  assert.ok(
    Math.abs((x[0] as number) - Math.cos(1)) < 1e-6 && Math.abs((x[1] as number) - Math.sin(1)) < 1e-6,
  );
  assert.ok(Math.abs((x[2] as number) - Math.cos(0.01)) < 1e-6);
  const y = new Float32Array([1, 1, 0, 0]);
  k.rope(y, new Int32Array([2]), 1, { headDim: 4, style: 'neox', freqBase: 10000 });
  assert.ok(
    Math.abs((y[0] as number) - Math.cos(2)) < 1e-6 && Math.abs((y[2] as number) - Math.sin(2)) < 1e-6,
  );
  const ff = llama3FreqFactors(64, 500000, {
    factor: 8,
    lowFreqFactor: 1,
    highFreqFactor: 4,
    originalContext: 8192,
  });
  assert.equal(ff[0], 1);
  assert.equal(ff[31], 8);
});

test('attention with one position returns v; causal mask hides later positions', () => {
  const k = new ReferenceKernels();
  const cache = k.createKvCache({ layers: 1, kvHeads: 1, headDim: 2, maxSeq: 4, type: 'f32' });
  k.kvStore(cache, 0, 0, new Float32Array([1, 0, 0, 1]), new Float32Array([5, 6, 7, 8]), 2);
  const out = new Float32Array(8);
  // two query heads share the kv head; token 0 sees only position 0.
  k.attention(cache, new Float32Array([1, 0, 0, 1, 1, 0, 0, 1]), out, { layer: 0, heads: 2, pos0: 0, n: 2 });
  assert.deepEqual(Array.from(out.subarray(0, 4)), [5, 6, 5, 6]);
  assert.ok((out[4] as number) > 5 && (out[4] as number) < 7);
  assert.throws(
    () => k.attention(cache, new Float32Array(8), out, { layer: 0, heads: 2, pos0: 3, n: 2 }),
    (e) => isTandemError(e, 'KERNELS_CONTEXT_FULL'),
  );
});

test('rmsNorm, softmax and swiglu', () => {
  const k = new ReferenceKernels();
  const out = new Float32Array(2);
  k.rmsNorm(new Float32Array([3, 4]), new Float32Array([1, 2]), 0, out, 1);
  const s = Math.sqrt(12.5);
  assert.ok(Math.abs((out[0] as number) - 3 / s) < 1e-6 && Math.abs((out[1] as number) - 8 / s) < 1e-6);
  const p = new Float32Array([0, Math.log(3)]);
  k.softmax(p, 1, 2);
  assert.ok(Math.abs((p[0] as number) - 0.25) < 1e-6);
  const g = new Float32Array([0, 2]);
  k.swiglu(g, new Float32Array([1, 3]), g);
  assert.equal(g[0], 0);
  assert.ok(Math.abs((g[1] as number) - (2 / (1 + Math.exp(-2))) * 3) < 1e-5);
});
