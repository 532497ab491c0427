import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fromBf16, fromF16, fromNumbers, toBf16, toF16, toNumbers, writeElement, allocate } from './dtype.js';

test('f16 encodes known values, subnormals, overflow and NaN', () => {
  assert.equal(toF16(1), 0x3c00);
  assert.equal(toF16(-2), 0xc000);
  assert.equal(toF16(65504), 0x7bff);
  assert.equal(toF16(65520), 0x7c00); // ties past max round to infinity
  assert.equal(toF16(65519), 0x7bff);
  assert.equal(toF16(2 ** -24), 0x0001);
  assert.equal(toF16(2 ** -25), 0x0000); // tie to even
  assert.equal(toF16(3 * 2 ** -25), 0x0002);
  assert.equal(toF16(2 ** -14), 0x0400);
  assert.equal(toF16(-0), 0x8000);
  assert.equal(toF16(Infinity), 0x7c00);
  assert.ok(Number.isNaN(fromF16(toF16(NaN))));
  assert.equal(toF16(1 + 2 ** -11), 0x3c00); // tie to even (down)
  assert.equal(toF16(1 + 3 * 2 ** -11), 0x3c02); // tie to even (up)
});

test('f16 round-trips every finite pattern', () => {
  for (let bits = 0; bits < 65536; bits++) {
    const v = fromF16(bits);
    if (Number.isNaN(v)) continue;
    assert.equal(toF16(v), bits, `pattern ${bits.toString(16)}`);
  }
});

test('bf16 encodes known values and round-trips every finite pattern', () => {
  assert.equal(toBf16(1), 0x3f80);
  assert.equal(toBf16(-1.5), 0xbfc0);
  assert.equal(toBf16(1 + 2 ** -8), 0x3f80); // tie to even
  assert.equal(toBf16(1 + 3 * 2 ** -8), 0x3f82);
  assert.equal(toBf16(3.5e38), 0x7f80);
  assert.ok(Number.isNaN(fromBf16(toBf16(NaN))));
  for (let bits = 0; bits < 65536; bits++) {
    const v = fromBf16(bits);
    if (Number.isNaN(v)) continue;
    assert.equal(toBf16(v), bits, `pattern ${bits.toString(16)}`);
  }
});

test('f16 rounding picks the nearest representable value on random inputs', () => {
  let seed = 12345;
  const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) * 2 - 1;
  for (let i = 0; i < 20000; i++) {
    const x = rand() * 2 ** ((i % 36) - 20); // stays below 65504: overflow is tested above
    const bits = toF16(x);
    const v = fromF16(bits);
    const err = Math.abs(v - x);
    for (const n of [bits - 1, bits + 1]) {
      if ((n & 0x7c00) === 0x7c00 || n < 0 || n > 0xffff || (n & 0x7fff) === 0x7fff) continue;
      if (Math.sign(fromF16(n)) !== Math.sign(v) && v !== 0) continue;
      assert.ok(err <= Math.abs(fromF16(n) - x), `x=${x} chose ${v}, neighbour ${fromF16(n)} is nearer`);
    }
  }
});

test('i32 writes wrap and truncate; numbers round-trip through every dtype', () => {
  const a = allocate('i32', 2);
  writeElement('i32', a, 0, 2 ** 31);
  writeElement('i32', a, 1, -7.9);
  assert.deepEqual([...a], [-(2 ** 31), -7]);
  for (const d of ['f32', 'f16', 'bf16', 'i32'] as const) {
    assert.deepEqual([...toNumbers(d, fromNumbers(d, [0, 1, -3, 100]))], [0, 1, -3, 100]);
  }
});
