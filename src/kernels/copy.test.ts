import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyBytes, copyF32, NATIVE_COPY_MIN, nativeCopy } from './copy.js';

test('copyBytes copies exactly the source into the destination at an offset, shared or not, small or large', () => {
  if (process.platform === 'linux') assert.ok(nativeCopy, 'libc is reachable through koffi on Linux');
  for (const shared of [false, true]) {
    for (const n of [0, 5, NATIVE_COPY_MIN - 1, NATIVE_COPY_MIN, 300_001]) {
      const backing = shared ? new SharedArrayBuffer(n + 64) : new ArrayBuffer(n + 64);
      const dst = new Uint8Array(backing, 8); // not at the start of its buffer
      dst.fill(0xee);
      const src = new Uint8Array(n + 3).map((_, i) => (i * 31 + 7) & 0xff).subarray(3); // a view with an offset too
      copyBytes(dst, 13, src);
      assert.deepEqual(dst.subarray(13, 13 + n), src, `${n} bytes, shared ${shared}`);
      assert.ok(
        dst.subarray(0, 13).every((b) => b === 0xee),
        'nothing before the target range changed',
      );
      assert.ok(
        dst.subarray(13 + n).every((b) => b === 0xee),
        'nothing after it changed',
      );
    }
  }
});

test('copyBytes refuses a range that does not fit instead of writing past the view', () => {
  const backing = new Uint8Array(2 * NATIVE_COPY_MIN).fill(1);
  const dst = backing.subarray(0, NATIVE_COPY_MIN);
  const src = new Uint8Array(NATIVE_COPY_MIN).fill(9);
  assert.throws(() => copyBytes(dst, 1, src), RangeError);
  assert.ok(
    backing.subarray(NATIVE_COPY_MIN).every((b) => b === 1),
    'the bytes past the view are untouched',
  );
});

test('copyF32 copies floats at an element offset into shared or plain memory, small or large, and refuses what does not fit', () => {
  for (const shared of [false, true]) {
    for (const n of [3, NATIVE_COPY_MIN / 4 - 1, NATIVE_COPY_MIN / 4, 70_001]) {
      const backing = shared ? new SharedArrayBuffer(4 * (n + 40)) : new ArrayBuffer(4 * (n + 40));
      const dst = new Float32Array(backing, 16).fill(-2);
      const src = Float32Array.from({ length: n + 1 }, (_, i) => i * 0.25 - 7).subarray(1);
      copyF32(dst, 5, src);
      assert.deepEqual(dst.subarray(5, 5 + n), src, `${n} floats, shared ${shared}`);
      assert.ok(dst.subarray(0, 5).every((v) => v === -2) && dst.subarray(5 + n).every((v) => v === -2));
      assert.throws(() => copyF32(dst, dst.length - n + 1, src), RangeError, 'one float past the end');
      assert.ok(
        dst.subarray(5 + n).every((v) => v === -2),
        'a refused copy writes nothing',
      );
    }
  }
});
