import { test } from 'node:test';
import assert from 'node:assert/strict';
import { leafCount, leafRanges, MAX_LEAVES } from './leaves.js';

test('a projection gets the most leaves (a power of two) that hold whole units', () => {
  assert.equal(MAX_LEAVES, 4);
  assert.equal(leafCount(2048, 64), 4); // TinyLlama attn_output: 32 heads of 64, Q8_0
  assert.equal(leafCount(5632, 32), 4); // TinyLlama ffn_down, Q8_0
  assert.equal(leafCount(5632, 256), 2); // the same in a K-quant: 22 super-blocks
  assert.equal(leafCount(576, 64), 1); // SmolLM2-135M attn_output: 9 heads
  assert.equal(leafCount(1536, 32), 4);
  assert.equal(leafCount(96, 32), 1); // 3 blocks
});

test('a shard multiplies its leaves when it holds a whole subtree of them, else its range as one', () => {
  const r = (start: number, end: number) => ({ start, end });
  assert.deepEqual(leafRanges(2048, 4, r(0, 2048)), [r(0, 512), r(512, 1024), r(1024, 1536), r(1536, 2048)]);
  assert.deepEqual(leafRanges(2048, 4, r(1024, 2048)), [r(1024, 1536), r(1536, 2048)]); // rank 1 of 2
  assert.deepEqual(leafRanges(2048, 4, r(512, 1024)), [r(512, 1024)]); // rank 1 of 4
  assert.deepEqual(leafRanges(2048, 4, r(683, 1365)), [r(683, 1365)]); // rank 1 of 3: not on leaf edges
  assert.deepEqual(leafRanges(2048, 4, r(512, 1536)), [r(512, 1536)]); // two leaves, but not one subtree
  assert.deepEqual(leafRanges(2048, 4, r(0, 1536)), [r(0, 1536)]); // three leaves
  assert.deepEqual(leafRanges(576, 1, r(0, 576)), [r(0, 576)]);
});
