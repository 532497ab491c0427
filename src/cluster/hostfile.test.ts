import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isTandemError } from '../errors/index.js';
import { defaultNodePort, loadHostfile, parseAnyHostfile, parseHostfile } from './hostfile.js';

test('hostfile: one node per line with optional mem= and speed=, comments ignored', () => {
  const hosts = parseHostfile(
    '# cluster\n10.0.0.1:7100 mem=12G speed=1.5\n\n[::1]:7101   # local\nmac-2.local:7100 mem=512M\n',
  );
  assert.deepEqual(hosts, [
    { address: '10.0.0.1:7100', memLimit: 12 * 1024 ** 3, speed: 1.5 },
    { address: '[::1]:7101' },
    { address: 'mac-2.local:7100', memLimit: 512 * 1024 ** 2 },
  ]);
});

test('hostfile: bad lines name the file and line', () => {
  for (const [text, line] of [
    ['10.0.0.1', 1],
    ['a:1\nb:70000', 2],
    ['a:1 mem=lots', 1],
    ['a:1 speed=0', 1],
    ['a:1 colour=red', 1],
    ['# nothing', 1],
  ] as const) {
    assert.throws(
      () => parseHostfile(text, 'hosts.txt'),
      (e) => isTandemError(e, 'CLUSTER_BAD_HOSTFILE') && e.message.startsWith(`hosts.txt:${line}:`),
      text,
    );
  }
});

test('hostfile: a node listed twice is rejected, naming both lines', () => {
  for (const [text, first, second] of [
    ['a:7000\nb:7000\na:7000', 1, 3],
    ['# c\nHost.local:7000 mem=1G\n\nhost.LOCAL:07000 speed=2', 2, 4],
    ['[::1]:7001\n[::1]:7001', 1, 2],
  ] as const) {
    assert.throws(
      () => parseHostfile(text, 'hosts.txt'),
      (e) =>
        isTandemError(e, 'CLUSTER_BAD_HOSTFILE') &&
        e.message.startsWith(`hosts.txt:${second}: `) &&
        e.message.includes(`is already listed on line ${first}; each node must appear once`) &&
        e.hint.includes('its own port'),
      text,
    );
  }
  assert.equal(parseHostfile('a:7000\na:7001\nb:7000').length, 3);
});

test('every command reads both formats: a host:port list and an MLX JSON hostfile', () => {
  const list = parseAnyHostfile('m1.local:7100 mem=8G\nm2.local:7101\n', 'hosts.txt');
  assert.equal(list.format, 'list');
  assert.deepEqual(list.entries, [
    { address: 'm1.local:7100', memLimit: 8 * 1024 ** 3 },
    { address: 'm2.local:7101' },
  ]);
  assert.deepEqual(list.graph.hosts, ['m1.local', 'm2.local']);
  assert.equal(list.graph.links.length, 0);
  assert.equal(list.addresses.get('m2.local')?.ssh, 'm2.local');
  // two nodes on one host are two graph hosts, named by address
  assert.deepEqual(parseAnyHostfile('a:1\na:2').graph.hosts, ['a:1', 'a:2']);
  const mlx = parseAnyHostfile(
    JSON.stringify({
      backend: 'jaccl',
      hosts: [
        { ssh: 'm1', ips: ['10.0.0.1'], rdma: [null, 'rdma_en3'] },
        { ssh: 'm2', ips: [], rdma: ['rdma_en4', null] },
      ],
    }),
    'hosts.json',
  );
  assert.equal(mlx.format, 'mlx');
  assert.deepEqual(mlx.entries, [
    { address: `10.0.0.1:${defaultNodePort}` },
    { address: `m2:${defaultNodePort}` },
  ]);
  assert.equal(mlx.graph.links.length, 1);
});

test('hostfile errors are typed: a missing file, bad JSON, a JSON file without hosts', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-hostfile-'));
  try {
    assert.throws(
      () => loadHostfile(join(dir, 'nonexistent.json'), '--hostfile'),
      (e) =>
        isTandemError(e, 'CLUSTER_BAD_HOSTFILE') &&
        /cannot read hostfile/.test(e.message) &&
        e.hint.includes('--hostfile'),
    );
    const bad = join(dir, 'bad.json');
    writeFileSync(bad, '{ "hosts": [');
    assert.throws(
      () => loadHostfile(bad),
      (e) => isTandemError(e, 'CLUSTER_BAD_HOSTFILE') && /not valid JSON/.test(e.message),
    );
    writeFileSync(bad, '{ "hosts": [] }');
    assert.throws(
      () => loadHostfile(bad),
      (e) => isTandemError(e, 'CLUSTER_BAD_HOSTFILE') && /lists no hosts/.test(e.message),
    );
    writeFileSync(bad, '{ "nodes": [] }');
    assert.throws(
      () => loadHostfile(bad),
      (e) => isTandemError(e, 'TOPOLOGY_BAD_HOSTFILE'),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
