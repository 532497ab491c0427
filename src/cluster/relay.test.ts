import { test } from 'node:test';
import assert from 'node:assert/strict';
import { relayWiring, unlinkedRanks } from './relay.js';

test('relayWiring: 3 ranks less one link relay through the third, rooted at a rank linked to both', () => {
  assert.deepEqual(relayWiring(3, [[0, 1]]), {
    edges: [
      [0, 2],
      [1, 2],
    ],
    root: 2,
  });
  assert.equal(relayWiring(3, [[1, 2]])?.root, 0);
});

test('relayWiring: no relay with 2 ranks, with no rank linked to all, or with a rank cut off', () => {
  assert.equal(relayWiring(2, [[0, 1]]), undefined);
  assert.equal(
    relayWiring(3, [
      [0, 1],
      [1, 2],
    ]),
    undefined,
  );
  // 4 ranks: 0-1 and 2-3 down leave a ring 0-2-1-3-0, but no rank linked to all
  assert.equal(
    relayWiring(4, [
      [0, 1],
      [2, 3],
    ]),
    undefined,
  );
  assert.equal(
    relayWiring(4, [
      [0, 1],
      [0, 2],
    ])?.root,
    3,
  );
});

test('unlinkedRanks: only the pairs both present, as ranks of that order, once each', () => {
  const [a, b, c, d] = ['a', 'b', 'c', 'd'];
  assert.deepEqual(
    unlinkedRanks(
      [c, b, a],
      [
        [a, b],
        [b, a],
        [c, d],
      ],
    ),
    [[1, 2]],
  );
});
