import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sha256 } from './manifest.js';
import { digestOffThread, pieceDigest } from './piece-hash.js';

/** Bytes from a fixed-seed generator (xorshift32). */
function bytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

describe('piece digest', () => {
  it('is node:crypto SHA-256 of the view it is given, at every size and offset', async () => {
    const digest = pieceDigest();
    const all = bytes(4 * 1024 * 1024 + 77, 7);
    for (const [from, to] of [
      [0, 0],
      [0, 1],
      [3, 67],
      [5, all.length],
      [1024, 1024 + 4 * 1024 * 1024],
    ] as const) {
      const view = all.subarray(from, to);
      assert.equal(await digest(view), sha256(view), `bytes [${from}, ${to})`);
    }
  });

  it('many pieces in flight at once, more than koffi queues (256), each get their own hash', async () => {
    const pieces = Array.from({ length: 300 }, (_, i) => bytes(4096 + i * 101, i + 1));
    const got = await Promise.all(pieces.map((p) => pieceDigest()(p)));
    assert.deepEqual(
      got,
      pieces.map((p) => sha256(p)),
    );
  });

  it(
    'hashes off the main thread on Linux (Node carries OpenSSL)',
    { skip: process.platform !== 'linux' },
    () => {
      assert.equal(digestOffThread(), process.env.TANDEM_SLICE_HASH !== 'node');
    },
  );
});
