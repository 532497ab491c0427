import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../errors/index.js';
import { adjacency, findRing, fullMeshGraph, inducedGraph, isFullMesh, lineGraph, ringGraph, routePath, shortestRoutes, spanningTree, starGraph } from './graph.js';
import { chunkRanges, splitRange } from './chunks.js';

test('helpers build the expected graphs and reject bad or disconnected ones', () => {
  assert.equal(fullMeshGraph(4).edges.length, 6);
  assert.equal(ringGraph(5).edges.length, 5);
  assert.equal(ringGraph(2).edges.length, 1);
  assert.equal(lineGraph(4).edges.length, 3);
  assert.deepEqual(adjacency(starGraph(4)), [[1, 2, 3], [0], [0], [0]]);
  assert.ok(isFullMesh(adjacency(fullMeshGraph(3))));
  for (const bad of [{ size: 3, edges: [[0, 1]] as [number, number][] }, { size: 2, edges: [[0, 2]] as [number, number][] }, { size: 2, edges: [[1, 1]] as [number, number][] }]) {
    assert.throws(() => adjacency(bad), (e) => isTandemError(e, 'COLL_BAD_GRAPH'));
  }
});

test('shortest routes relay through the hub of a star and along a line', () => {
  const star = shortestRoutes(adjacency(starGraph(5)));
  assert.deepEqual(routePath(star, 3, 4), [3, 0, 4]);
  assert.deepEqual(routePath(star, 0, 2), [0, 2]);
  const line = shortestRoutes(adjacency(lineGraph(5)));
  assert.deepEqual(routePath(line, 4, 0), [4, 3, 2, 1, 0]);
  const ring = shortestRoutes(adjacency(ringGraph(6)));
  assert.deepEqual(routePath(ring, 0, 4), [0, 5, 4]);
});

test('findRing finds Hamiltonian cycles, including shuffled ones, and none on a line or star', () => {
  assert.deepEqual(findRing(adjacency(ringGraph(5))), [0, 1, 2, 3, 4]);
  const shuffled = { size: 4, edges: [[0, 2], [2, 1], [1, 3], [3, 0]] as [number, number][] };
  const ring = findRing(adjacency(shuffled));
  assert.ok(ring);
  ring.forEach((r, i) => assert.ok(adjacency(shuffled)[r]!.includes(ring[(i + 1) % 4]!)));
  assert.equal(findRing(adjacency(lineGraph(4))), undefined);
  assert.equal(findRing(adjacency(starGraph(4))), undefined);
});

test('spanning trees: binomial on a mesh, BFS over real links otherwise', () => {
  const t = spanningTree(adjacency(fullMeshGraph(8)), 0);
  assert.deepEqual(t.children[0], [1, 2, 4]);
  assert.equal(t.parent[7], 6);
  const shifted = spanningTree(adjacency(fullMeshGraph(5)), 3);
  assert.equal(shifted.parent[3], -1);
  assert.equal(shifted.parent[4], 3);
  const line = spanningTree(adjacency(lineGraph(4)), 2);
  assert.deepEqual(line.parent, [1, 2, -1, 2]);
  const g = inducedGraph(ringGraph(6), [1, 2, 3]);
  assert.deepEqual(g, { size: 3, edges: [[0, 1], [1, 2]] });
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
  assert.deepEqual(splitRange({ offset: 10, count: 5 }, 2), [{ offset: 10, count: 3 }, { offset: 13, count: 2 }]);
});
