import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { sha256 } from './manifest.js';
import { SliceCache } from './slice-cache.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-slice-writer-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** A slice of `bytes` bytes cut into pieces of the given lengths, with their hashes. */
function slice(bytes: number, lengths: number[]): { data: Uint8Array; lengths: number[]; hashes: string[] } {
  const data = Uint8Array.from({ length: bytes }, (_, i) => (i * 7 + 3) & 0xff);
  const hashes: string[] = [];
  let at = 0;
  for (const n of lengths) {
    hashes.push(sha256(data.subarray(at, at + n)));
    at += n;
  }
  return { data, lengths, hashes };
}

/** Writes the pieces through a writer told to expect `expected` of them, last piece first. */
async function writeEntry(cache: SliceCache, key: string, expected: number, s: ReturnType<typeof slice>) {
  const writer = cache.writer(key, expected);
  const offsets = s.lengths.map((_, i) => s.lengths.slice(0, i).reduce((a, b) => a + b, 0));
  for (const i of [...s.lengths.keys()].reverse())
    writer.piece(offsets[i]!, s.data.subarray(offsets[i]!, offsets[i]! + s.lengths[i]!));
  await writer.finish({ lengths: s.lengths, hashes: s.hashes }, s.data);
}

describe('slice cache entries written piece by piece', () => {
  it('pieces written at their places as they arrive read back whole, and no temporary file stays', async () => {
    const cache = new SliceCache(join(dir, 'a'));
    const s = slice(10_000, [4096, 4096, 1808]);
    await writeEntry(cache, 'k-0-3', 3, s);
    const into = new Uint8Array(10_000);
    assert.equal(cache.read('k-0-3', into, 'k'), true);
    assert.deepEqual(into, s.data);
    assert.deepEqual(readdirSync(cache.dir), ['k-0-3.slice']);
  });

  it('a slice that came in another number of pieces than expected is written again whole', async () => {
    const cache = new SliceCache(join(dir, 'b'));
    const s = slice(10_000, [6000, 4000]);
    await writeEntry(cache, 'k-0-2', 3, s);
    const into = new Uint8Array(10_000);
    assert.equal(cache.read('k-0-2', into, 'k'), true);
    assert.deepEqual(into, s.data);
  });

  it('an aborted entry leaves nothing: no entry, no temporary file', async () => {
    const cache = new SliceCache(join(dir, 'c'));
    const s = slice(10_000, [4096, 4096, 1808]);
    const writer = cache.writer('k-0-3', 3);
    writer.piece(0, s.data.subarray(0, 4096));
    await writer.abort(new Error('a damaged piece'));
    assert.equal(cache.read('k-0-3', new Uint8Array(10_000), 'k'), false);
    assert.deepEqual(readdirSync(cache.dir), []);
  });
});
