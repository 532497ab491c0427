import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../errors/index.js';
import { libcProblem, ShmSegment } from './shm-ffi.js';

const skip = libcProblem();
const name = (tag: string): string =>
  `/tandem-${process.pid}-${Math.floor(Math.random() * 0xffffffff).toString(16)}-${tag}`;

test(
  'shm segment: a SharedArrayBuffer whose writes the other mapping sees, Atomics included',
  { skip },
  () => {
    const a = ShmSegment.create(name('t'), 10_000);
    const b = ShmSegment.open(a.name, 10_000);
    try {
      assert.ok(a.buffer instanceof SharedArrayBuffer);
      assert.ok(a.buffer.byteLength >= 10_000);
      new Uint8Array(a.buffer, 0, 10_000).fill(7, 9990);
      assert.deepEqual([...new Uint8Array(b.buffer, 9990, 10)], new Array(10).fill(7));
      const ia = new Int32Array(a.buffer, 0, 4);
      const ib = new Int32Array(b.buffer, 0, 4);
      Atomics.store(ia, 1, 41);
      assert.equal(Atomics.add(ib, 1, 1), 41);
      assert.equal(Atomics.load(ia, 1), 42);
    } finally {
      a.unmap();
      b.unmap();
    }
  },
);

test('shm segment: after unmap the views read zeros and writes no longer reach the peer', { skip }, () => {
  const a = ShmSegment.create(name('t'), 4096);
  const b = ShmSegment.open(a.name, 4096);
  const va = new Uint8Array(a.buffer, 0, 4096);
  const vb = new Uint8Array(b.buffer, 0, 4096);
  va.fill(5);
  assert.equal(vb[100], 5);
  a.unmap();
  assert.equal(va[100], 0, 'private zero pages replaced the shared ones');
  va[100] = 9;
  assert.equal(vb[100], 5, 'the write stayed local');
  b.unmap();
  assert.equal(vb[100], 0);
  a.unmap(); // twice is harmless
});

test('shm segment: impossible sizes and foreign names are typed errors', { skip }, () => {
  for (const len of [0, -1, 5 * 2 ** 30]) {
    assert.throws(
      () => ShmSegment.create(name('t'), len),
      (e: unknown) => isTandemError(e, 'FABRIC_SHM_FAILED') && /not possible/.test((e as Error).message),
    );
  }
  assert.throws(
    () => ShmSegment.open('/etc-passwd', 4096),
    (e: unknown) => isTandemError(e, 'FABRIC_SHM_FAILED'),
  );
  assert.throws(
    () => ShmSegment.open(name('gone'), 4096),
    (e: unknown) => isTandemError(e, 'FABRIC_SHM_FAILED'),
  );
});
