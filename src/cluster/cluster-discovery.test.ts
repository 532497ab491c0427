import { test } from 'node:test';
import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import { TandemError } from '../errors/index.js';
import { discoverCluster, DiscoveryResponder } from './cluster-discovery.js';

// On loopback: the member probes ::1 directly (loopback carries no multicast); the namespace
// rig (test/e2e/cluster-discover.test.ts) covers the multicast path between hosts.
const secret = 'discovery-test-secret-0123456789';

test('a member holding the secret finds the coordinator: the cluster port it names', async () => {
  const r = await DiscoveryResponder.start({ secret, clusterAddress: '10.1.2.3:7111', port: 0 });
  try {
    const found = await discoverCluster({
      secret,
      port: r.port,
      targets: ['::1'],
      multicast: false,
      timeoutMs: 3000,
    });
    assert.deepEqual(found, ['10.1.2.3:7111']);
  } finally {
    await r.close();
  }
});

test('a coordinator on every address answers a local probe with the loopback address', async () => {
  const r = await DiscoveryResponder.start({ secret, clusterAddress: '0.0.0.0:7112', port: 0 });
  try {
    const found = await discoverCluster({
      secret,
      port: r.port,
      targets: ['::1'],
      multicast: false,
      timeoutMs: 3000,
    });
    assert.deepEqual(found, ['127.0.0.1:7112']);
  } finally {
    await r.close();
  }
});

test('another secret is neither answered nor believed: the probe times out with a typed error', async () => {
  const r = await DiscoveryResponder.start({ secret, clusterAddress: '10.1.2.3:7111', port: 0 });
  try {
    await assert.rejects(
      discoverCluster({
        secret: 'another-secret-0123456789abcdef',
        port: r.port,
        targets: ['::1'],
        multicast: false,
        timeoutMs: 700,
      }),
      (e: unknown) =>
        e instanceof TandemError && e.code === 'CLUSTER_TIMEOUT' && /within 700 ms/.test(e.message),
    );
    assert.ok(r.refused > 0, 'the probes were refused');
  } finally {
    await r.close();
  }
});

test('noise, truncated and unsealed packets are refused without an answer, and the responder keeps answering', async () => {
  const r = await DiscoveryResponder.start({ secret, clusterAddress: '10.1.2.3:7111', port: 0 });
  const s = dgram.createSocket('udp6');
  try {
    let answers = 0;
    s.on('message', () => answers++);
    await new Promise<void>((done) => s.bind(0, '::1', () => done()));
    const packets = [
      Buffer.alloc(0),
      Buffer.from('x'),
      Buffer.alloc(32, 1),
      Buffer.concat([Buffer.alloc(32), Buffer.from('{"v":1,"kind":"probe","nonce":"n","ts":0}')]),
      Buffer.from(JSON.stringify({ v: 1, kind: 'probe', nonce: 'n', ts: Date.now() })),
    ];
    for (const p of packets) await new Promise<void>((done) => s.send(p, r.port, '::1', () => done()));
    const until = Date.now() + 2000;
    while (r.refused < packets.length && Date.now() < until) await new Promise((w) => setTimeout(w, 20));
    assert.equal(r.refused, packets.length);
    assert.equal(answers, 0);
    const found = await discoverCluster({
      secret,
      port: r.port,
      targets: ['::1'],
      multicast: false,
      timeoutMs: 3000,
    });
    assert.deepEqual(found, ['10.1.2.3:7111']);
  } finally {
    s.close();
    await r.close();
  }
});
