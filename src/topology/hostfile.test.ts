import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { exportMlxHostfile, importMlxHostfile } from './hostfile.js';
import { canonicalGraph, makeGraph } from './model.js';
import { isTandemError } from '../errors/index.js';

const fixture = new URL('../../test/fixtures/topology/mlx-hostfile-jaccl-4.json', import.meta.url);

test('imports an MLX jaccl hostfile into a full mesh of four', () => {
  const { graph, addresses, hostfile } = importMlxHostfile(JSON.parse(readFileSync(fixture, 'utf8')));
  assert.deepEqual(graph.hosts, ['m3-ultra-1', 'm3-ultra-2', 'm3-ultra-3', 'm3-ultra-4']);
  assert.equal(graph.links.length, 6);
  assert.deepEqual(graph.links[0], {
    a: 'm3-ultra-1',
    aPort: 'en3',
    b: 'm3-ultra-2',
    bPort: 'en3',
    kind: 'tb5',
  });
  assert.deepEqual(addresses.get('m3-ultra-2')?.ips, ['192.168.1.12']);
  assert.equal(hostfile.backend, 'jaccl');
});

test('export then import gives back the same graph, parallel cables as lists', () => {
  const graph = makeGraph(
    ['a', 'b', 'c'],
    [
      { a: 'a', aPort: 'en2', b: 'b', bPort: 'en2', kind: 'tb5' },
      { a: 'a', aPort: 'en3', b: 'b', bPort: 'en3', kind: 'tb5' },
      { a: 'b', aPort: 'en4', b: 'c', bPort: 'en2', kind: 'tb5' },
    ],
  );
  const file = exportMlxHostfile(graph, new Map([['a', { ssh: 'a', ips: ['10.0.0.1'] }]]));
  assert.deepEqual(file.hosts[0]?.rdma, [null, ['rdma_en2', 'rdma_en3'], null]);
  assert.deepEqual(file.hosts[2]?.rdma, [null, 'rdma_en2', null]);
  const back = importMlxHostfile(JSON.parse(JSON.stringify(file)));
  assert.equal(canonicalGraph(back.graph), canonicalGraph(graph));
});

test('rejects malformed hostfiles with a typed error', () => {
  const bad = [
    {},
    { hosts: [{ ips: [] }] },
    {
      hosts: [
        { ssh: 'a', rdma: [null] },
        { ssh: 'b', rdma: [null, null] },
      ],
    },
    {
      hosts: [
        { ssh: 'a', rdma: [null, 'rdma_en2'] },
        { ssh: 'b', rdma: [null, null] },
      ],
    },
    {
      hosts: [
        { ssh: 'a', rdma: [null, 5] },
        { ssh: 'b', rdma: [5, null] },
      ],
    },
  ];
  for (const v of bad)
    assert.throws(
      () => importMlxHostfile(v),
      (e) => isTandemError(e, 'TOPOLOGY_BAD_HOSTFILE'),
      JSON.stringify(v),
    );
});
