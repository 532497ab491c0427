import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TandemError } from '../errors/index.js';
import { openDevice } from '../fabric/index.js';
import { createCommunicator } from './create-communicator.js';
import { parseAddress, unreachablePair } from './rendezvous.js';

test('hosts rendezvous: every rank listens at its own address; a ring of links works', async () => {
  const base = 52000 + Math.floor(Math.random() * 5000);
  const addresses = [0, 1, 2, 3].map((r) => `loopback:${base + r}`);
  const comms = await Promise.all(
    addresses.map((_, rank) =>
      createCommunicator({
        rank,
        size: 4,
        provider: 'loopback',
        graph: 'ring',
        rendezvous: { kind: 'hosts', addresses },
        timeoutMs: 20_000,
      }),
    ),
  );
  const out = await Promise.all(
    comms.map(async (c) => {
      const d = Int32Array.of(c.rank, 1);
      await c.allReduce(d);
      return [...d];
    }),
  );
  for (const d of out) assert.deepEqual(d, [6, 4]);
  await Promise.all(comms.map((c) => c.close()));
});

test('a rank with the wrong secret cannot join: COLL_RENDEZVOUS, nothing hangs', async () => {
  const dev = await openDevice('loopback');
  const listener = await dev.listen({ port: 0, secret: 'right' });
  const address = `${listener.host}:${listener.port}`;
  const results = await Promise.allSettled([
    createCommunicator({
      rank: 0,
      size: 2,
      device: dev,
      listener,
      rendezvous: { kind: 'root', address },
      secret: 'right',
      connectTimeoutMs: 1500,
    }),
    createCommunicator({
      rank: 1,
      size: 2,
      provider: 'loopback',
      rendezvous: { kind: 'root', address },
      secret: 'wrong',
      connectTimeoutMs: 1500,
    }),
  ]);
  for (const r of results) {
    assert.equal(r.status, 'rejected');
    assert.equal((r.reason as { code: string }).code, 'COLL_RENDEZVOUS', (r.reason as Error).message);
  }
  await listener.close();
  await dev.close();
});

test('a peer that refuses until the deadline names the pair but is not unreachable; an abort ends the wait early', async () => {
  // a tcp port nothing listens on: refused, which is retried until the deadline (the peer may start late)
  const dev = await openDevice('tcp');
  const probe = await dev.listen({ host: '127.0.0.1', port: 0, secret: 's' });
  const address = `127.0.0.1:${probe.port}`;
  await probe.close();
  // rank 1 dialling the root (rank 0) at `address`, its error as the value
  const dial = (connectTimeoutMs: number, signal?: AbortSignal): Promise<TandemError> =>
    createCommunicator({
      rank: 1,
      size: 2,
      device: dev,
      rendezvous: { kind: 'root', address },
      secret: 's',
      connectTimeoutMs,
      ...(signal ? { signal } : {}),
    }).then(
      () => assert.fail('connected to a closed port'),
      (e: unknown) => e as TandemError,
    );
  const refused = await dial(600);
  assert.ok(refused instanceof TandemError && refused.code === 'COLL_RENDEZVOUS', String(refused));
  assert.deepEqual([refused.details.rank, refused.details.peer, refused.details.unreachable], [1, 0, false]);
  assert.equal(unreachablePair(refused), undefined, 'a refused peer is no missing link');
  const abort = new AbortController();
  const started = Date.now();
  setTimeout(() => abort.abort(new Error('the coordinator gave up')), 100);
  const aborted = await dial(20_000, abort.signal);
  assert.equal((aborted as TandemError).code, 'COLL_RENDEZVOUS');
  assert.ok(Date.now() - started < 10_000, 'the abort, not the 20 s deadline, ended the wait');
  await dev.close();
});

test('an unreachable peer names the pair a coordinator can route around', () => {
  const error = new TandemError('COLL_RENDEZVOUS', 'rank 2 of 3: could not connect to rank 0', {
    hint: 'h',
    details: { rank: 2, peer: 0, unreachable: true },
  });
  assert.deepEqual(unreachablePair(error), [2, 0]);
  assert.equal(
    unreachablePair(
      new TandemError('COLL_TIMEOUT', 'x', { hint: 'h', details: { rank: 2, peer: 0, unreachable: true } }),
    ),
    undefined,
  );
});

test('addresses must be host:port', () => {
  assert.deepEqual(parseAddress('10.0.0.1:7000'), { host: '10.0.0.1', port: 7000 });
  assert.throws(() => parseAddress('10.0.0.1'), /host:port/);
  assert.throws(() => parseAddress('h:70000'), /host:port/);
});

test('root rendezvous at another rank than 0: a line 0-1-2 rooted at its middle works, 0 and 2 relayed', async () => {
  const port = 57000 + Math.floor(Math.random() * 3000);
  const address = `loopback:${port}`;
  const comms = await Promise.all(
    [0, 1, 2].map((rank) =>
      createCommunicator({
        rank,
        size: 3,
        provider: 'loopback',
        graph: {
          size: 3,
          edges: [
            [0, 1],
            [1, 2],
          ],
        },
        rendezvous: { kind: 'root', address, rank: 1 },
        timeoutMs: 20_000,
      }),
    ),
  );
  const out = await Promise.all(
    comms.map(async (c) => {
      const d = Int32Array.of(c.rank, 1);
      await c.allReduce(d);
      if (c.rank === 0) await c.send(2, Int32Array.of(7));
      const got = new Int32Array(1);
      if (c.rank === 2) await c.recv(0, got);
      return [...d, got[0]];
    }),
  );
  assert.deepEqual(out, [
    [3, 3, 0],
    [3, 3, 0],
    [3, 3, 7],
  ]);
  assert.ok(comms[1]!.relayed > 0, 'the middle rank relayed between the ends');
  await Promise.all(comms.map((c) => c.close()));
});
