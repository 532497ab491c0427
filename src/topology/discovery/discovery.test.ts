import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { decodeHello, encodeHello, type Hello } from './protocol.js';
import { loadSecret } from './secret.js';
import { measureLink, startMeasureServer, whoIs } from './measure.js';
import { isTandemError } from '../../errors/index.js';
import { createServer } from 'node:net';
import { createSocket } from 'node:dgram';
import { DiscoveryAgent } from './agent.js';

const secret = Buffer.from('unit-test-secret-0123456789');
const hello: Hello = {
  v: 1,
  host: 'a',
  iface: 'en2',
  ts: 1,
  views: [{ host: 'a', boot: 'x', seq: 3, graphHash: 'h', links: [] }],
};

test('hellos are authenticated: a tampered byte or another secret is refused', () => {
  const packet = encodeHello(secret, hello);
  assert.deepEqual(decodeHello(secret, packet), hello);
  assert.equal(decodeHello(Buffer.from('another-secret-0123456789'), packet), undefined);
  const tampered = Buffer.from(packet);
  tampered.writeUInt8(tampered.readUInt8(tampered.length - 3) ^ 1, tampered.length - 3);
  assert.equal(decodeHello(secret, tampered), undefined);
  assert.equal(decodeHello(secret, packet.subarray(0, 20)), undefined);
});

test('the cluster secret comes from a file or TANDEM_SECRET and must be long enough', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-secret-'));
  try {
    writeFileSync(join(dir, 's'), 'abcdefghijklmnopqrstuvwxyz\n');
    assert.equal(loadSecret(join(dir, 's')).toString(), 'abcdefghijklmnopqrstuvwxyz');
    assert.equal(loadSecret(undefined, { TANDEM_SECRET: '0123456789abcdef' }).length, 16);
    assert.throws(
      () => loadSecret(undefined, {}),
      (e) => isTandemError(e, 'TOPOLOGY_BAD_SECRET'),
    );
    assert.throws(
      () => loadSecret(undefined, { TANDEM_SECRET: 'short' }),
      (e) => isTandemError(e, 'TOPOLOGY_BAD_SECRET') && /only 5 bytes/.test(e.message),
    );
    assert.throws(
      () => loadSecret(join(dir, 'missing')),
      (e) => isTandemError(e, 'TOPOLOGY_BAD_SECRET'),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('measurement server: latency, bandwidth and who-is for holders of the secret only', async () => {
  const server = await startMeasureServer(0, secret, 'host-a');
  const port = (server.address() as AddressInfo).port;
  try {
    const f = await measureLink('127.0.0.1', port, secret, { pings: 5, bytes: 1 << 20 });
    assert.ok(f.latencyUs > 0 && Number.isFinite(f.latencyUs));
    assert.ok(f.bandwidthGBps > 0 && Number.isFinite(f.bandwidthGBps));
    assert.equal(await whoIs('127.0.0.1', port, secret), 'host-a');
    assert.equal(await whoIs('::1', port, secret), 'host-a');
    const wrong = Buffer.from('not-the-cluster-secret-000');
    assert.equal(await whoIs('127.0.0.1', port, wrong), '', 'an unauthenticated client gets nothing');
    await assert.rejects(measureLink('127.0.0.1', port, wrong, { pings: 1, timeoutMs: 2000 }));
  } finally {
    server.close();
  }
});

test('a measurement against a dead port fails within its deadline', async () => {
  const server = await startMeasureServer(0, secret, 'x');
  const port = (server.address() as AddressInfo).port;
  await new Promise((r) => server.close(r));
  await assert.rejects(whoIs('127.0.0.1', port, secret, 1000));
});

test('an agent that fails to start (its TCP port taken) closes its UDP socket', async () => {
  const blocker = createServer();
  await new Promise<void>((resolve) => blocker.listen({ port: 0, host: '::' }, resolve));
  const port = (blocker.address() as AddressInfo).port;
  try {
    const agent = new DiscoveryAgent({ host: 'a', secret, port, measure: false });
    await assert.rejects(agent.start(), (e: NodeJS.ErrnoException) => e.code === 'EADDRINUSE');
    // Without reuseAddr this bind fails while the agent's UDP socket is still open.
    const probe = createSocket('udp6');
    await new Promise<void>((resolve, reject) => {
      probe.once('error', reject);
      probe.bind(port, '::', resolve);
    });
    probe.close();
  } finally {
    blocker.close();
  }
});
