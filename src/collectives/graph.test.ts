import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../errors/index.js';
import { fullMeshGraph, isFullMesh, lineGraph, ringGraph, starGraph } from '../topology/rank-graph.js';
import { adjacency } from './graph.js';
import { chunkRanges, splitRange } from './chunks.js';

test('helpers build the expected graphs and reject bad or disconnected ones', () => {
  assert.equal(fullMeshGraph(4).edges.length, 6);
  assert.equal(ringGraph(5).edges.length, 5);
  assert.equal(ringGraph(2).edges.length, 1);
  assert.equal(lineGraph(4).edges.length, 3);
  assert.deepEqual(adjacency(starGraph(4)), [[1, 2, 3], [0], [0], [0]]);
  assert.ok(isFullMesh(adjacency(fullMeshGraph(3))));
  for (const bad of [
    { size: 3, edges: [[0, 1]] as [number, number][] },
    { size: 2, edges: [[0, 2]] as [number, number][] },
    { size: 2, edges: [[1, 1]] as [number, number][] },
  ]) {
    assert.throws(
      () => adjacency(bad),
      (e) => isTandemError(e, 'COLL_BAD_GRAPH'),
    );
  }
});

test('chunkRanges covers counts 0, 1, 7, 4096 and 1,000,003 exactly, sizes within one unit', () => {
  for (const count of [0, 1, 7, 4096, 1_000_003]) {
    for (const parts of [1, 2, 3, 5, 8]) {
      for (const align of [1, 32]) {
        const r = chunkRanges(count, parts, align);
        assert.equal(r.length, parts);
        let at = 0;
        for (const c of r) {
          assert.equal(c.offset, at);
          at += c.count;
        }
        assert.equal(at, count);
        const sizes = r.map((c) => c.count);
        if (align === 1) assert.ok(Math.max(...sizes) - Math.min(...sizes) <= 1);
        r.filter((c) => c.count > 0).forEach((c) => assert.equal(c.offset % align, 0));
      }
    }
  }
  assert.deepEqual(splitRange({ offset: 10, count: 5 }, 2), [
    { offset: 10, count: 3 },
    { offset: 13, count: 2 },
  ]);
});
