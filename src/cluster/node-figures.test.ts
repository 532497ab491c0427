import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLocalWorld } from '../collectives/local-world.js';
import { PROTOCOL_VERSION, MalformedMessage } from './control-messages.js';
import { probeLinks } from './link-probe.js';
import { parseFigures, StepClock, type NodeFigures } from './node-figures.js';
import { ControlClient, mac, nonce, readMessages, send } from './protocol.js';

/*
 * What a member reports of its links and its time: the probe over a real (loopback) world, the
 * byte counters of the router exact end to end, the step clock's split, and the heartbeat's
 * figures checked at the coordinator's edge (a malformed one closes the connection).
 */

const good: NodeFigures = {
  rank: 1,
  links: [{ peer: 0, sent: 10, received: 20, latencyUs: 12.5, bandwidthMBps: null }],
  computeMs: 30,
  commMs: 5,
};

test('figures: a heartbeat without them is fine; well-formed ones parse; malformed ones are refused', () => {
  assert.equal(parseFigures(undefined), undefined);
  assert.deepEqual(parseFigures(JSON.parse(JSON.stringify(good))), good);
  const link = good.links[0] as NodeFigures['links'][number];
  for (const bad of [
    null,
    'x',
    { ...good, rank: -1 },
    { ...good, rank: 1.5 },
    { ...good, computeMs: 'a' },
    { ...good, commMs: -1 },
    { ...good, links: {} },
    { ...good, links: [null] },
    { ...good, links: [{ ...link, sent: -5 }] },
    { ...good, links: [{ ...link, peer: 'a' }] },
    { ...good, links: [{ ...link, latencyUs: 'fast' }] },
    { ...good, links: Array.from({ length: 5000 }, () => link) },
  ])
    assert.throws(() => parseFigures(bad), MalformedMessage, JSON.stringify(bad)?.slice(0, 80));
});

test('step clock: the meter’s rise during a step is communication, the rest compute', async () => {
  const clock = new StepClock();
  const meter = { ms: 100 };
  const out = await clock.time(meter, async () => {
    await sleep(30);
    meter.ms += 10;
    return 'done';
  });
  assert.equal(out, 'done');
  assert.equal(clock.commMs, 10);
  assert.ok(clock.computeMs >= 15 && clock.computeMs < 1000, `compute ${clock.computeMs} ms`);
  await assert.rejects(
    clock.time(meter, () => Promise.reject(new Error('step failed'))),
    /step failed/,
  );
});

test('link probe over 3 ranks: each measures the other two; bytes sent one way equal bytes received the other', async () => {
  const world = await createLocalWorld(3, { timeoutMs: 10_000 });
  try {
    const probes = await Promise.all(
      world.map((c) => probeLinks(c, { bytes: 1 << 16, transfers: 2, rounds: 4 })),
    );
    probes.forEach((mine, rank) => {
      assert.deepEqual(
        mine.map((p) => p.peer).sort(),
        [0, 1, 2].filter((r) => r !== rank),
      );
      for (const p of mine) assert.ok(p.latencyUs > 0 && p.bandwidthMBps > 0, JSON.stringify(p));
    });
    const bytes = world.map((c) => c.router.peerBytes());
    for (let a = 0; a < 3; a++)
      for (let b = 0; b < 3; b++) {
        if (a === b) continue;
        const ab = bytes[a]?.get(b);
        assert.ok(ab, `rank ${a} counts its link to ${b}`);
        assert.equal(ab.sent, bytes[b]?.get(a)?.received, `${a} -> ${b}: sent equals received`);
        // as leader: 2 warm-up + 4 timed pings and 2 transfers; as follower: 6 echoes and 2 acks
        assert.ok(ab.sent >= 2 * (1 << 16) + 14 * 4, `${a} -> ${b}: ${ab.sent} bytes`);
      }
  } finally {
    await Promise.all(world.map((c) => c.close()));
  }
});

/** A fake node: the handshake, then whatever `after` sends. Resolves with its address. */
async function fakeNode(
  secret: string,
  after: (socket: Socket) => void,
): Promise<{ address: string; close: () => void }> {
  const server = createServer((socket) => {
    const challenge = nonce();
    send(socket, { type: 'challenge', nonce: challenge, version: PROTOCOL_VERSION });
    readMessages(
      socket,
      (m) => {
        if (m.type !== 'auth') return;
        send(socket, { type: 'welcome', mac: mac(secret, 'node', m.nonce as string), info: {} });
        after(socket);
      },
      () => socket.destroy(),
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return { address: `127.0.0.1:${port}`, close: () => server.close() };
}

test('a heartbeat’s figures are kept with the one before; a malformed one closes the connection', async () => {
  const secret = 'figures-secret-0123456789';
  let node: Socket | undefined;
  const fake = await fakeNode(secret, (s) => (node = s));
  const client = await ControlClient.connect(fake.address, secret, 'fake', 5000);
  let lost = '';
  client.onLost = (e) => (lost = e.message);
  try {
    send(node as Socket, { event: 'heartbeat' });
    send(node as Socket, { event: 'heartbeat', figures: good });
    for (let i = 0; i < 100 && client.heartbeat?.figures === undefined; i++) await sleep(10);
    assert.deepEqual(client.heartbeat?.figures, good);
    assert.equal(client.previousHeartbeat?.figures, undefined, 'the plain heartbeat before it');
    assert.ok((client.heartbeat?.controlReceived ?? 0) > 0, 'the control link counts its bytes');
    send(node as Socket, { event: 'heartbeat', figures: { ...good, links: 'many' } });
    for (let i = 0; i < 100 && lost === ''; i++) await sleep(10);
    assert.match(
      lost,
      /fake \(127\.0\.0\.1:\d+\) sent a malformed message: 'heartbeat' with no list of links/,
    );
    assert.deepEqual(client.heartbeat?.figures, good, 'the malformed heartbeat changed nothing');
  } finally {
    client.close();
    fake.close();
  }
});
