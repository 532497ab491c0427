import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EXACT_GROUP_SIZES, groupPieces, groupSum, leafPlan, shardLeaves } from './leaves.js';

const r = (start: number, end: number) => ({ start, end });

// TinyLlama's attn_output: 32 heads of 64 columns, cut by 2, 4 and 3 ranks (heads 10 and 21 for 3)
const tinyLlamaHeads = leafPlan(2048, [[1024], [512, 1024, 1536], [640, 1344]], 64);

test("leaf edges are the cuts of 2, 4 and 3 ranks; the tree splits at 2's, then 4's, then 3's", () => {
  assert.deepEqual(EXACT_GROUP_SIZES, [2, 4, 3]);
  assert.deepEqual(tinyLlamaHeads.edges, [0, 512, 640, 1024, 1344, 1536, 2048]);
  assert.deepEqual(tinyLlamaHeads.tree, [
    [0, [1, 2]],
    [[3, 4], 5],
  ]);
  // cuts off the alignment (a K-quant's 256-column blocks here) are not edges
  assert.deepEqual(
    leafPlan(2048, [[1024], [512, 1024, 1536], [640, 1344]], 256).edges,
    [0, 512, 1024, 1536, 2048],
  );
  assert.deepEqual(leafPlan(2048, [[1024], [512, 1024, 1536], [640, 1344]], 256).tree, [
    [0, 1],
    [2, 3],
  ]);
  // one leaf when nothing cuts
  assert.deepEqual(leafPlan(96, [[], [], []], 32), { edges: [0, 96], tree: 0 });
});

test("a shard multiplies its leaves and sends its largest subtrees; the group adds them in the tree's top", () => {
  assert.deepEqual(shardLeaves(tinyLlamaHeads, r(0, 2048)), {
    ranges: [r(0, 512), r(512, 640), r(640, 1024), r(1024, 1344), r(1344, 1536), r(1536, 2048)],
    pieces: [tinyLlamaHeads.tree],
  });
  // 2 ranks: one subtree each
  assert.deepEqual(shardLeaves(tinyLlamaHeads, r(1024, 2048)).pieces, [[[0, 1], 2]]);
  assert.deepEqual(groupSum(tinyLlamaHeads, [r(0, 1024), r(1024, 2048)]), { counts: [1, 1], tree: [0, 1] });
  // 4 ranks: one subtree each, added in pairs
  assert.deepEqual(shardLeaves(tinyLlamaHeads, r(512, 1024)).pieces, [[0, 1]]);
  assert.deepEqual(groupSum(tinyLlamaHeads, [r(0, 512), r(512, 1024), r(1024, 1536), r(1536, 2048)]), {
    counts: [1, 1, 1, 1],
    tree: [
      [0, 1],
      [2, 3],
    ],
  });
  // 3 ranks: two pieces each, and the whole tree over the six
  const three = [r(0, 640), r(640, 1344), r(1344, 2048)];
  assert.deepEqual(shardLeaves(tinyLlamaHeads, three[1]!), {
    ranges: [r(640, 1024), r(1024, 1344)],
    pieces: [0, 1],
  });
  assert.deepEqual(groupSum(tinyLlamaHeads, three), { counts: [2, 2, 2], tree: tinyLlamaHeads.tree });
  // a split off the edges (5 ranks): the range as one leaf, and no exact group sum
  assert.deepEqual(shardLeaves(tinyLlamaHeads, r(384, 832)), { ranges: [r(384, 832)], pieces: [0] });
  assert.equal(groupSum(tinyLlamaHeads, [r(0, 384), r(384, 832), r(832, 2048)]), undefined);
  // ranges that leave a gap or come out of order are no group either
  assert.equal(groupSum(tinyLlamaHeads, [r(0, 512), r(1024, 2048)]), undefined);
  assert.equal(groupSum(tinyLlamaHeads, [r(1024, 2048), r(0, 1024)]), undefined);
  assert.equal(groupSum(tinyLlamaHeads, [r(0, 2048)]), undefined);
});

test('groupPieces: the parts a rank sends per exchange, as the group adds them', () => {
  // TinyLlama's 32 heads: a rank of 3 holds parts of two subtrees (groupSum's counts above)
  assert.equal(groupPieces(32, 3), 2);
  assert.equal(groupPieces(32, 2), 1);
  assert.equal(groupPieces(32, 4), 1);
  // not an exact group size: one part each, summed flat
  assert.equal(groupPieces(32, 5), 1);
  assert.equal(groupPieces(32, 1), 1);
  // 4 heads on 3 ranks: 1, 1 and 2 heads, each a whole subtree
  assert.equal(groupPieces(4, 3), 1);
});
