import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chooseAlgorithm } from './select.js';

test('algorithm choice follows size and topology', () => {
  const mesh4 = { size: 4, fullMesh: true, hasRing: true };
  assert.equal(chooseAlgorithm('all-reduce', 8, mesh4, false), 'mesh');
  assert.equal(chooseAlgorithm('all-reduce', 64 * 1024, mesh4, false), 'rhd');
  assert.equal(
    chooseAlgorithm('all-reduce', 1 << 20, mesh4, false),
    'rhd',
    "a power of two: rhd moves the ring's bytes in fewer steps",
  );
  assert.equal(chooseAlgorithm('all-reduce', 4 << 20, mesh4, false), 'ring');
  assert.equal(
    chooseAlgorithm('all-reduce', 1 << 20, { size: 6, fullMesh: true, hasRing: true }, false),
    'ring',
    'not a power of two: rhd folds',
  );
  assert.equal(chooseAlgorithm('all-gather', 1 << 20, mesh4, false), 'ring');
  const pair = { size: 2, fullMesh: true, hasRing: true };
  assert.equal(
    chooseAlgorithm('all-reduce', 256 * 1024, pair, false),
    'mesh',
    '2 ranks: one step sends what the ring sends',
  );
  assert.equal(chooseAlgorithm('all-reduce', 256 * 1024 + 4, pair, false), 'ring');
  assert.equal(chooseAlgorithm('all-gather', 256 * 1024, pair, false), 'ring');
  assert.equal(chooseAlgorithm('all-reduce', 8, { size: 16, fullMesh: true, hasRing: true }, false), 'rhd');
  const ring = { size: 6, fullMesh: false, hasRing: true };
  assert.equal(chooseAlgorithm('all-reduce', 8, ring, false), 'tree');
  assert.equal(chooseAlgorithm('all-gather', 1 << 20, ring, false), 'ring');
  const star = { size: 5, fullMesh: false, hasRing: false };
  assert.equal(chooseAlgorithm('all-reduce', 1 << 24, star, false), 'tree');
  assert.equal(chooseAlgorithm('all-to-all', 1 << 24, star, false), 'mesh');
  assert.equal(
    chooseAlgorithm('all-reduce', 1 << 24, star, true),
    'tree',
    'q8 on a star: tree over real links',
  );
  assert.equal(chooseAlgorithm('all-reduce', 64 * 1024, mesh4, true), 'mesh', 'q8: never rhd');
  assert.equal(chooseAlgorithm('all-reduce', 1 << 24, ring, true), 'ring');
  assert.equal(
    chooseAlgorithm('all-reduce', 1 << 24, { size: 1, fullMesh: true, hasRing: true }, false),
    'mesh',
  );
});
