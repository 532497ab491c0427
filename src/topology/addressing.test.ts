import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { addressCommands, assignAddresses, hostAddresses } from './addressing.js';
import { chooseAlgorithm } from './init.js';
import { readClusterConfig, writeClusterConfig, type ClusterConfig } from './cluster-config.js';
import { toConnectivity } from './model.js';
import { graphOf } from './testing.js';
import { isTandemError } from '../errors/index.js';

test('one /30 per cable in canonical order, the same whatever order the cables were found in', () => {
  const g = graphOf('a-b b-c c-a');
  const plan = assignAddresses(g, '10.99.0.0/16');
  assert.deepEqual(
    plan.map((l) => [l.a, l.aPort, l.b, l.bPort, l.subnet, l.aAddress, l.bAddress]),
    [
      ['a', 'p0', 'b', 'p0', '10.99.0.0/30', '10.99.0.1', '10.99.0.2'],
      ['a', 'p1', 'c', 'p1', '10.99.0.4/30', '10.99.0.5', '10.99.0.6'],
      ['b', 'p1', 'c', 'p0', '10.99.0.8/30', '10.99.0.9', '10.99.0.10'],
    ],
  );
  assert.deepEqual(assignAddresses({ hosts: g.hosts, links: [...g.links].reverse() }), plan);
  assert.deepEqual(hostAddresses(plan, 'c'), [
    { iface: 'p1', address: '10.99.0.6', peer: 'a', peerAddress: '10.99.0.5' },
    { iface: 'p0', address: '10.99.0.10', peer: 'b', peerAddress: '10.99.0.9' },
  ]);
  assert.equal(assignAddresses(g, '192.168.7.77/24')[1]?.subnet, '192.168.7.4/30');
});

test('commands per platform; bad or small networks are refused', () => {
  const plan = assignAddresses(graphOf('a-b'));
  assert.deepEqual(addressCommands(plan, 'a', 'linux', 'tcp'), [
    ['ip', 'addr', 'replace', '10.99.0.1/30', 'dev', 'p0'],
  ]);
  assert.deepEqual(addressCommands(plan, 'b', 'darwin', 'rdma'), [
    ['sudo', 'ifconfig', 'bridge0', 'down'],
    ['sudo', 'ifconfig', 'p0', 'inet', '10.99.0.2', 'netmask', '255.255.255.252'],
    ['sudo', 'route', 'change', '10.99.0.1', '-interface', 'p0'],
  ]);
  assert.throws(
    () => assignAddresses(graphOf('a-b'), '10.99.0.0'),
    (e) => isTandemError(e, 'INVALID_ARGUMENT'),
  );
  assert.throws(
    () => assignAddresses(graphOf('a-b b-c'), '10.99.0.0/30'),
    (e) => isTandemError(e, 'TOPOLOGY_ADDRESS_EXHAUSTED'),
  );
});

test('init picks mesh, ring or relayed from the cables and refuses what they cannot give', () => {
  assert.equal(chooseAlgorithm(graphOf('a-b b-c c-a'), 'auto').algorithm, 'mesh');
  assert.deepEqual(chooseAlgorithm(graphOf('a-b b-c c-d d-a'), 'auto'), {
    algorithm: 'ring',
    ring: ['a', 'b', 'c', 'd'],
    class: 'ring',
  });
  assert.equal(chooseAlgorithm(graphOf('a-b b-c'), 'auto').algorithm, 'relayed');
  assert.equal(chooseAlgorithm(graphOf('a-b b-c c-a'), 'ring').algorithm, 'ring');
  assert.throws(
    () => chooseAlgorithm(graphOf('a-b b-c c-d d-a'), 'mesh'),
    (e) => isTandemError(e, 'TOPOLOGY_PLAN_IMPOSSIBLE') && /2 more cable/.test(e.message),
  );
  assert.throws(
    () => chooseAlgorithm(graphOf('a-b b-c'), 'ring'),
    (e) => isTandemError(e, 'TOPOLOGY_PLAN_IMPOSSIBLE'),
  );
  assert.throws(
    () => chooseAlgorithm(graphOf('a-b c-d'), 'auto'),
    (e) => isTandemError(e, 'TOPOLOGY_PLAN_IMPOSSIBLE'),
  );
});

test('the cluster config round-trips and a foreign file is refused', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-config-'));
  try {
    const g = graphOf('a-b b-c');
    const config: ClusterConfig = {
      version: 1,
      mode: 'tcp',
      requested: 'auto',
      algorithm: 'relayed',
      class: 'line',
      self: 'a',
      hosts: g.hosts,
      links: assignAddresses(g),
      connectivity: toConnectivity(g),
      routes: [{ from: 'a', to: 'c', via: ['b'] }],
      port: 47600,
      createdAt: 'now',
    };
    const path = join(dir, 'sub', 'cluster.json');
    writeClusterConfig(path, config);
    const back = readClusterConfig(path);
    assert.deepEqual(back.config, config);
    assert.deepEqual(back.graph.hosts, ['a', 'b', 'c']);
    writeFileSync(join(dir, 'x.json'), '{"hello": 1}');
    assert.throws(
      () => readClusterConfig(join(dir, 'x.json')),
      (e) => isTandemError(e, 'TOPOLOGY_BAD_CONFIG'),
    );
    assert.throws(
      () => readClusterConfig(join(dir, 'none.json')),
      (e) => isTandemError(e, 'TOPOLOGY_BAD_CONFIG'),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
