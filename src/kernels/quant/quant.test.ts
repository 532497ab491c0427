import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  GgmlType,
  bf16ToF32,
  byteSize,
  dequantize,
  f16ToF32,
  f32ToBf16,
  f32ToF16,
  getScaleMinK4,
  ggmlTypeByName,
  ggmlTypeInfo,
  quantize,
} from './index.js';
import { packScalesMinsK4 } from './k-common.js';

function normal(n: number, seed: number, sigma = 1): Float32Array {
  let s = seed >>> 0 || 1;
  const next = (): number => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return (s + 0.5) / 4294967296;
  };
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++)
    out[i] = sigma * Math.sqrt(-2 * Math.log(next())) * Math.cos(2 * Math.PI * next());
  return out;
}

function rms(a: Float32Array): number {
  let s = 0;
  for (const v of a) s += v * v;
  return Math.sqrt(s / a.length);
}

function rmsError(a: Float32Array, b: Float32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += ((a[i] as number) - (b[i] as number)) ** 2;
  return Math.sqrt(s / a.length);
}

test('type table matches ggml block sizes and type sizes', () => {
  const expect: [string, number, number, number][] = [
    ['F32', 0, 1, 4],
    ['F16', 1, 1, 2],
    ['Q4_0', 2, 32, 18],
    ['Q8_0', 8, 32, 34],
    ['Q4_K', 12, 256, 144],
    ['Q5_K', 13, 256, 176],
    ['Q6_K', 14, 256, 210],
    ['BF16', 30, 1, 2],
  ];
  for (const [name, id, block, size] of expect) {
    const info = ggmlTypeInfo(id);
    assert.ok(info, name);
    assert.equal(info.name, name);
    assert.equal(info.blockSize, block);
    assert.equal(info.typeSize, size);
    assert.ok(info.supported);
    assert.equal(ggmlTypeByName(name.toLowerCase())?.id, id);
  }
  assert.equal(ggmlTypeInfo(4), undefined, 'type 4 (old Q4_2) was removed from ggml');
  assert.equal(byteSize(ggmlTypeInfo(GgmlType.Q6_K)!, 512), 420);
  assert.throws(() => byteSize(ggmlTypeInfo(GgmlType.Q8_0)!, 33), { code: 'INVALID_ARGUMENT' });
  assert.throws(() => quantize(GgmlType.Q2_K, new Float32Array(256)), { code: 'INVALID_ARGUMENT' });
});

test('f16 conversion rounds to nearest even and round-trips every half', () => {
  assert.equal(f32ToF16(1), 0x3c00);
  assert.equal(f32ToF16(-2), 0xc000);
  assert.equal(f32ToF16(65504), 0x7bff);
  assert.equal(f32ToF16(65520), 0x7c00);
  assert.equal(f32ToF16(2 ** -24), 1);
  assert.equal(f32ToF16(2 ** -25), 0);
  assert.equal(f32ToF16(3 * 2 ** -25), 2);
  assert.equal(f32ToF16(1 + 2 ** -11), 0x3c00);
  assert.equal(f32ToF16(1 + 3 * 2 ** -11), 0x3c02);
  assert.equal(f32ToF16(-0), 0x8000);
  assert.ok(Number.isNaN(f16ToF32(f32ToF16(NaN))));
  for (let h = 0; h < 65536; h++) {
    const f = f16ToF32(h);
    if (!Number.isNaN(f)) assert.equal(f32ToF16(f), h, `half 0x${h.toString(16)}`);
  }
});

test('bf16 conversion rounds to nearest even and keeps NaN quiet', () => {
  assert.equal(f32ToBf16(1), 0x3f80);
  assert.equal(f32ToBf16(1 + 2 ** -8), 0x3f80);
  assert.equal(f32ToBf16(1 + 3 * 2 ** -8), 0x3f82);
  assert.equal(bf16ToF32(0xc040), -3);
  assert.ok(Number.isNaN(bf16ToF32(f32ToBf16(NaN))));
});

test('Q8_0 block layout: f16 d then 32 signed bytes', () => {
  const block = new Uint8Array(34);
  block[0] = 0x00;
  block[1] = 0x38; // d = 0.5
  for (let j = 0; j < 32; j++) block[2 + j] = (127 - j * 8) & 0xff;
  const out = dequantize(GgmlType.Q8_0, block, 32);
  for (let j = 0; j < 32; j++) assert.equal(out[j], 0.5 * (127 - j * 8));
  assert.deepEqual(quantize(GgmlType.Q8_0, out), block);
});

test('Q4_0 block layout: value j in the low nibble of byte j, value j+16 in the high nibble', () => {
  const block = new Uint8Array(18);
  block[1] = 0x3c; // d = 1
  for (let j = 0; j < 16; j++) block[2 + j] = j | ((15 - j) << 4);
  const out = dequantize(GgmlType.Q4_0, block, 32);
  for (let j = 0; j < 16; j++) {
    assert.equal(out[j], j - 8);
    assert.equal(out[j + 16], 7 - j);
  }
});

test('k-quant scale packing round-trips every 6-bit scale and min', () => {
  const ls = new Uint8Array(8);
  const lm = new Uint8Array(8);
  const packed = new Uint8Array(12);
  const sm = { sc: 0, m: 0 };
  for (let v = 0; v < 64; v++) {
    for (let j = 0; j < 8; j++) {
      ls[j] = (v + 7 * j) & 63;
      lm[j] = (63 - v + 5 * j) & 63;
    }
    packScalesMinsK4(ls, lm, packed, 0);
    for (let j = 0; j < 8; j++) {
      getScaleMinK4(j, packed, 0, sm);
      assert.equal(sm.sc, ls[j]);
      assert.equal(sm.m, lm[j]);
    }
  }
});

function kBlockHeader(block: Uint8Array, ls: number[], lm: number[]): void {
  block[1] = 0x3c; // d = 1
  block[3] = 0x38; // dmin = 0.5
  packScalesMinsK4(Uint8Array.from(ls), Uint8Array.from(lm), block, 4);
}

test('Q4_K block layout: d, dmin, packed scales, 4 chunks of 64 nibbles', () => {
  const block = new Uint8Array(144);
  const ls = [1, 2, 3, 4, 5, 6, 7, 63];
  const lm = [0, 1, 2, 3, 4, 5, 6, 40];
  kBlockHeader(block, ls, lm);
  const q = (i: number): number => (i * 7 + 3) % 16;
  for (let c = 0; c < 4; c++)
    for (let l = 0; l < 32; l++) block[16 + 32 * c + l] = q(64 * c + l) | (q(64 * c + 32 + l) << 4);
  const out = dequantize(GgmlType.Q4_K, block, 256);
  for (let i = 0; i < 256; i++) {
    const j = i >> 5;
    assert.equal(out[i], (ls[j] as number) * q(i) - 0.5 * (lm[j] as number), `value ${i}`);
  }
});

test('Q5_K block layout: the fifth bit of value 64c+l is bit 2c of qh[l], of 64c+32+l bit 2c+1', () => {
  const block = new Uint8Array(176);
  const ls = [3, 1, 4, 1, 5, 9, 2, 6];
  const lm = [2, 7, 1, 8, 2, 8, 1, 8];
  kBlockHeader(block, ls, lm);
  const q = (i: number): number => (i * 13 + 5) % 32;
  for (let c = 0; c < 4; c++) {
    for (let l = 0; l < 32; l++) {
      const a = q(64 * c + l);
      const b = q(64 * c + 32 + l);
      block[48 + 32 * c + l] = (a & 15) | ((b & 15) << 4);
      block[16 + l] = (block[16 + l] as number) | ((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1));
    }
  }
  const out = dequantize(GgmlType.Q5_K, block, 256);
  for (let i = 0; i < 256; i++) {
    const j = i >> 5;
    assert.equal(out[i], (ls[j] as number) * q(i) - 0.5 * (lm[j] as number), `value ${i}`);
  }
});

test('Q6_K block layout: ql, qh, 16 signed scales, d last', () => {
  const block = new Uint8Array(210);
  const q = (i: number): number => (i * 11 + 1) % 64;
  const sc = (s: number): number => s * 9 - 70;
  for (let s = 0; s < 16; s++) block[192 + s] = sc(s) & 0xff;
  block[209] = 0x3c; // d = 1
  for (let h = 0; h < 2; h++) {
    for (let l = 0; l < 32; l++) {
      const [a, b, c, d] = [0, 32, 64, 96].map((k) => q(128 * h + l + k)) as [number, number, number, number];
      block[64 * h + l] = (a & 15) | ((c & 15) << 4);
      block[64 * h + 32 + l] = (b & 15) | ((d & 15) << 4);
      block[128 + 32 * h + l] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((d >> 4) << 6);
    }
  }
  const out = dequantize(GgmlType.Q6_K, block, 256);
  for (let i = 0; i < 256; i++) assert.equal(out[i], sc(i >> 4) * (q(i) - 32), `value ${i}`);
});

// Relative RMS error bounds for N(0,1) data: each is a few times what ggml's quantizers reach.
const bounds: [string, number][] = [
  ['F32', 0],
  ['F16', 5e-4],
  ['BF16', 4e-3],
  ['Q8_0', 0.01],
  ['Q6_K', 0.03],
  ['Q5_K', 0.06],
  ['Q4_K', 0.12],
  ['Q4_0', 0.15],
];

for (const [name, bound] of bounds) {
  test(`${name} round-trips random data within ${bound} relative RMS error`, () => {
    const type = ggmlTypeByName(name)!.id;
    const x = normal(256 * 64, 42);
    x.fill(0, 512, 768); // an all-zero super-block must stay zero
    const q = quantize(type, x);
    assert.equal(q.length, byteSize(ggmlTypeByName(name)!, x.length));
    const y = dequantize(type, q, x.length);
    const err = rmsError(x, y) / rms(x);
    assert.ok(err <= bound, `${name}: relative RMS error ${err} > ${bound}`);
    for (let i = 512; i < 768; i++) assert.ok(y[i] === 0, `value ${i} of an all-zero block is ${y[i]}`);
    // A row slice dequantizes on its own: blocks are independent.
    const info = ggmlTypeByName(name)!;
    const part = dequantize(type, q.subarray(byteSize(info, 1024)), 1024);
    assert.deepEqual(part, y.subarray(1024, 2048));
    // Dequantized values re-quantize to (almost) themselves.
    const again = dequantize(type, quantize(type, y), y.length);
    assert.ok(rmsError(again, y) / rms(y) <= bound / 2, `${name} is not near a fixed point`);
  });
}

// d is stored as f16, which moves q*d by up to 127*d*2^-11 (6% of a step).
test('Q8_0 error per value is at most half a step plus the f16 rounding of d', () => {
  const x = normal(32 * 16, 7, 0.02);
  const y = dequantize(GgmlType.Q8_0, quantize(GgmlType.Q8_0, x), x.length);
  for (let b = 0; b < 16; b++) {
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[32 * b + j] as number));
    const step = amax / 127;
    for (let j = 0; j < 32; j++)
      assert.ok(Math.abs((x[32 * b + j] as number) - (y[32 * b + j] as number)) <= step * 0.563);
  }
});
