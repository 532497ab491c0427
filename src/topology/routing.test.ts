import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  fullMeshGraph,
  inducedGraph,
  lineGraph,
  neighbourLists,
  ringGraph,
  starGraph,
  type RankGraph,
} from './rank-graph.js';
import { findRing, hopCounts, routePath, shortestPath, shortestRoutes, spanningTree } from './routing.js';

test('shortest routes relay through the hub of a star and along a line', () => {
  const star = shortestRoutes(neighbourLists(starGraph(5)));
  assert.deepEqual(routePath(star, 3, 4), [3, 0, 4]);
  assert.deepEqual(routePath(star, 0, 2), [0, 2]);
  const line = shortestRoutes(neighbourLists(lineGraph(5)));
  assert.deepEqual(routePath(line, 4, 0), [4, 3, 2, 1, 0]);
  const ring = shortestRoutes(neighbourLists(ringGraph(6)));
  assert.deepEqual(routePath(ring, 0, 4), [0, 5, 4]);
});

test('findRing finds Hamiltonian cycles, including shuffled ones, and none on a line or star', () => {
  assert.deepEqual(findRing(neighbourLists(ringGraph(5))), [0, 1, 2, 3, 4]);
  const shuffled = {
    size: 4,
    edges: [
      [0, 2],
      [2, 1],
      [1, 3],
      [3, 0],
    ] as [number, number][],
  };
  const ring = findRing(neighbourLists(shuffled));
  assert.ok(ring);
  ring.forEach((r, i) => assert.ok(neighbourLists(shuffled)[r]!.includes(ring[(i + 1) % 4]!)));
  assert.equal(findRing(neighbourLists(lineGraph(4))), undefined);
  assert.equal(findRing(neighbourLists(starGraph(4))), undefined);
});

test('spanning trees: binomial on a mesh, BFS over real links otherwise', () => {
  const t = spanningTree(neighbourLists(fullMeshGraph(8)), 0);
  assert.deepEqual(t.children[0], [1, 2, 4]);
  assert.equal(t.parent[7], 6);
  const shifted = spanningTree(neighbourLists(fullMeshGraph(5)), 3);
  assert.equal(shifted.parent[3], -1);
  assert.equal(shifted.parent[4], 3);
  const line = spanningTree(neighbourLists(lineGraph(4)), 2);
  assert.deepEqual(line.parent, [1, 2, -1, 2]);
  const g = inducedGraph(ringGraph(6), [1, 2, 3]);
  assert.deepEqual(g, {
    size: 3,
    edges: [
      [0, 1],
      [1, 2],
    ],
  });
});

test('tie-break: the smallest-numbered neighbour on a fewest-hop path, the same route from every rank', () => {
  // square 0-1-2-3-0: both ways round are two hops; 0->2 and 2->0 go via 1, 1->3 and 3->1 via 0
  const square = shortestRoutes(neighbourLists(ringGraph(4)));
  assert.deepEqual(routePath(square, 0, 2), [0, 1, 2]);
  assert.deepEqual(routePath(square, 2, 0), [2, 1, 0]);
  assert.deepEqual(routePath(square, 1, 3), [1, 0, 3]);
  assert.deepEqual(routePath(square, 3, 1), [3, 0, 1]);
  // 0 reaches 5 by 0-1-3-5, 0-2-3-5 and 0-2-4-5: the route is the first of them in order
  const g: RankGraph = {
    size: 6,
    edges: [
      [0, 2],
      [0, 1],
      [1, 3],
      [2, 3],
      [2, 4],
      [3, 5],
      [4, 5],
    ],
  };
  assert.deepEqual(shortestPath(neighbourLists(g), 0, 5), [0, 1, 3, 5]);
  assert.deepEqual(shortestPath(neighbourLists(g), 5, 0), [5, 3, 1, 0]);
  assert.equal(shortestPath(neighbourLists({ size: 3, edges: [[0, 1]] }), 0, 2), undefined);
  assert.deepEqual(shortestRoutes(neighbourLists({ size: 3, edges: [[0, 1]] }))[0], [0, 1, -1]);
});

/** Every fewest-hop path src -> dst, by depth-first search over the hop counts. */
function allShortestPaths(adj: number[][], src: number, dst: number): number[][] {
  const toDst = hopCounts(adj, dst);
  if ((toDst[src] as number) < 0) return [];
  const out: number[][] = [];
  const walk = (path: number[]): void => {
    const at = path[path.length - 1] as number;
    if (at === dst) return void out.push(path);
    for (const v of adj[at]!) if (toDst[v] === (toDst[at] as number) - 1) walk([...path, v]);
  };
  walk([src]);
  return out;
}

const lexLess = (x: number[], y: number[]): boolean => {
  const i = x.findIndex((v, k) => v !== y[k]);
  return i >= 0 && (x[i] as number) < (y[i] as number);
};

test('tie-break: routes are the lexicographically smallest fewest-hop paths, table and paths agree (random graphs)', () => {
  let seed = 12345;
  const random = (): number => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  for (let trial = 0; trial < 200; trial++) {
    const size = 2 + Math.floor(random() * 7);
    const edges: [number, number][] = [];
    for (let a = 0; a < size; a++) for (let b = a + 1; b < size; b++) if (random() < 0.35) edges.push([a, b]);
    const adj = neighbourLists({ size, edges });
    const routes = shortestRoutes(adj);
    for (let src = 0; src < size; src++) {
      for (let dst = 0; dst < size; dst++) {
        const all = allShortestPaths(adj, src, dst);
        const path = shortestPath(adj, src, dst);
        if (all.length === 0) {
          assert.equal(path, undefined);
          assert.equal(routes[src]![dst], -1);
          continue;
        }
        const smallest = all.reduce((m, p) => (lexLess(p, m) ? p : m));
        assert.deepEqual(path, smallest, `${JSON.stringify(edges)}: ${src} -> ${dst}`);
        assert.deepEqual(routePath(routes, src, dst), smallest);
      }
    }
  }
});

test('findRing: the lexicographically smallest cycle from 0, searched beyond 16 ranks too', () => {
  assert.deepEqual(findRing(neighbourLists(fullMeshGraph(4))), [0, 1, 2, 3]);
  assert.deepEqual(
    findRing(
      neighbourLists({
        size: 4,
        edges: [
          [0, 2],
          [2, 1],
          [1, 3],
          [3, 0],
        ],
      }),
    ),
    [0, 2, 1, 3],
  );
  assert.deepEqual(findRing(neighbourLists({ size: 2, edges: [[0, 1]] })), [0, 1]);
  // 20 ranks cabled in the order 0, 2, 4, ..., 18, 19, 17, ..., 1
  const order = [
    ...Array.from({ length: 10 }, (_, i) => 2 * i),
    ...Array.from({ length: 10 }, (_, i) => 19 - 2 * i),
  ];
  const edges = order.map((r, i) => [r, order[(i + 1) % 20]] as [number, number]);
  assert.deepEqual(findRing(neighbourLists({ size: 20, edges })), [0, ...order.slice(1).reverse()]);
});
