import { test } from 'node:test';
import assert from 'node:assert/strict';
import { classify, findRing, hopsFrom, relayRoutes, route, toRouting } from './classify.js';
import { neighbourLists } from './rank-graph.js';
import { shortestRoutes } from './routing.js';
import { findBridgeLoops } from './loops.js';
import { canonicalGraph, makeGraph, normalizeLinks, toConnectivity } from './model.js';
import { graphOf } from './testing.js';
import { isTandemError } from '../errors/index.js';

test('classifies mesh, ring, line, star, partial, disconnected and single', () => {
  const cases: [string, string, string[]?][] = [
    ['a-b a-c a-d b-c b-d c-d', 'full-mesh'],
    ['a-b', 'full-mesh'],
    ['a-b b-c c-a', 'full-mesh'],
    ['a-b b-c c-d d-a', 'ring'],
    ['a-b b-c', 'line'],
    ['c-b b-a a-d', 'line'],
    ['h-a h-b h-c', 'star'],
    ['a-b b-c c-d d-a a-c', 'partial'],
    ['a-b c-d', 'disconnected'],
  ];
  for (const [spec, kind] of cases) assert.equal(classify(graphOf(spec)).kind, kind, spec);
  assert.equal(classify(graphOf('', ['solo'])).kind, 'single');
  assert.deepEqual(classify(graphOf('a-b b-c c-d d-a')).order, ['a', 'b', 'c', 'd']);
  assert.deepEqual(classify(graphOf('c-b b-a a-d')).order, ['c', 'b', 'a', 'd']);
  assert.equal(classify(graphOf('h-a h-b h-c')).hub, 'h');
  assert.equal(classify(graphOf('a-b b-c c-d d-a')).diameter, 2);
  assert.equal(classify(graphOf('a-b c-d')).diameter, Infinity);
});

test('parallel cables between one pair count as one neighbour', () => {
  const g = graphOf('a-b a-b b-c c-a');
  assert.equal(classify(g).kind, 'full-mesh');
  assert.deepEqual(toConnectivity(g), {
    size: 3,
    edges: [
      [0, 1],
      [0, 2],
      [1, 2],
    ],
  });
});

test('routes go the fewest hops and are the same on every host', () => {
  const ring = graphOf('a-b b-c c-d d-e e-f f-a');
  assert.deepEqual(route(ring, 'a', 'd'), ['a', 'b', 'c', 'd']);
  assert.deepEqual(route(ring, 'a', 'e'), ['a', 'f', 'e']);
  assert.deepEqual(route(ring, 'c', 'c'), ['c']);
  const relays = relayRoutes(graphOf('a-b b-c c-d d-a'));
  assert.deepEqual(relays, [
    { from: 'a', to: 'c', via: ['b'] },
    { from: 'b', to: 'd', via: ['a'] },
  ]);
  assert.throws(
    () => route(graphOf('a-b c-d'), 'a', 'd'),
    (e) => isTandemError(e, 'TOPOLOGY_NO_ROUTE'),
  );
});

test('finds a ring through every host when the cables allow one', () => {
  assert.deepEqual(findRing(graphOf('a-b a-c a-d b-c b-d c-d')), ['a', 'b', 'c', 'd']);
  const ring = findRing(graphOf('a-b b-c c-d d-a a-c'));
  assert.equal(ring?.length, 4);
  assert.equal(findRing(graphOf('h-a h-b h-c')), undefined);
  assert.equal(findRing(graphOf('a-b b-c')), undefined);
});

test('bridge loops: a cycle of bridged ports is a storm, one unbridged port breaks it', () => {
  const g = graphOf('a-b b-c c-a');
  const all = new Map([
    ['a', new Set(['p0', 'p1'])],
    ['b', new Set(['p0', 'p1'])],
    ['c', new Set(['p0', 'p1'])],
  ]);
  const loops = findBridgeLoops(g, all);
  assert.equal(loops.length, 1);
  assert.equal(loops[0]?.links.length, 3);
  assert.equal(loops[0]?.hosts[0], loops[0]?.hosts[3]);
  assert.deepEqual(new Set(loops[0]?.hosts), new Set(['a', 'b', 'c']));
  const broken = new Map(all);
  broken.set('b', new Set(['p0']));
  assert.deepEqual(findBridgeLoops(g, broken), []);
  assert.deepEqual(findBridgeLoops(graphOf('a-b b-c'), all), []);
  const doubled = graphOf('a-b a-b');
  assert.equal(
    findBridgeLoops(
      doubled,
      new Map([
        ['a', new Set(['p0', 'p1'])],
        ['b', new Set(['p0', 'p1'])],
      ]),
    ).length,
    1,
  );
});

test('makeGraph rejects bad input with a typed error', () => {
  const bad = (hosts: string[], spec: string): void =>
    assert.throws(
      () => makeGraph(hosts, graphOf(spec, hosts).links),
      (e) => isTandemError(e, 'TOPOLOGY_INVALID_GRAPH'),
      spec,
    );
  bad(['a', 'b'], 'a-c');
  bad(['a', 'a'], '');
  bad(['a', 'b'], 'a-a');
  assert.throws(
    () =>
      makeGraph(
        ['a', 'b', 'c'],
        [
          { a: 'a', aPort: 'en2', b: 'b', bPort: 'en2', kind: 'tb5' },
          { a: 'a', aPort: 'en2', b: 'c', bPort: 'en2', kind: 'tb5' },
        ],
      ),
    (e) => isTandemError(e, 'TOPOLOGY_INVALID_GRAPH') && /carries two links/.test(e.message),
  );
});

test('canonical form ignores orientation and order', () => {
  const x = makeGraph(
    ['a', 'b', 'c'],
    [
      { a: 'a', aPort: 'e1', b: 'b', bPort: 'e2', kind: 'ethernet' },
      { a: 'c', aPort: 'e1', b: 'b', bPort: 'e1', kind: 'ethernet' },
    ],
  );
  const y = makeGraph(['c', 'b', 'a'], normalizeLinks([...x.links].reverse()));
  assert.equal(canonicalGraph(x), canonicalGraph(y));
  assert.notEqual(canonicalGraph(x), canonicalGraph({ hosts: x.hosts, links: x.links.slice(1) }));
});

test('next-hop table in rank space for relayed collectives', () => {
  // ring a-b-c-d-a: two-hop pairs go through the smaller-named neighbour (a->c via b, b->d and d->b via a)
  assert.deepEqual(toRouting(graphOf('a-b b-c c-d d-a')), {
    size: 4,
    nextHop: [
      [0, 1, 1, 3],
      [0, 1, 2, 0],
      [1, 1, 2, 3],
      [0, 0, 2, 3],
    ],
  });
  assert.deepEqual(toRouting(graphOf('a-b c-d')).nextHop[0], [0, 1, -1, -1]);
});

test('routes break ties by host name, toRouting by rank (the routes of a communicator over toConnectivity)', () => {
  const g = graphOf('a-b b-c c-d d-a', ['d', 'c', 'b', 'a']);
  assert.deepEqual(route(g, 'a', 'c'), ['a', 'b', 'c']);
  assert.deepEqual(findRing(g), ['a', 'b', 'c', 'd']);
  const table = toRouting(g);
  assert.equal(table.nextHop[3]?.[1], 0); // a (rank 3) -> c (rank 1) via d (rank 0), the smaller rank
  assert.deepEqual(table.nextHop, shortestRoutes(neighbourLists(toConnectivity(g))));
  assert.deepEqual(
    hopsFrom(g, 'a'),
    new Map([
      ['a', 0],
      ['b', 1],
      ['c', 2],
      ['d', 1],
    ]),
  );
});
