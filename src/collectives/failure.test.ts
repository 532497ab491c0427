import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { TandemError } from '../errors/index.js';
import type { Communicator } from './communicator.js';
import { createLocalWorld } from './local-world.js';

/** Failure behaviour in-process: mismatches, abort(), a lost peer; every wait bounded. */

/** Rejects with 'hung' if `p` has not settled within `ms` (a bound, not a timing assertion). */
function bounded<T>(p: Promise<T>, ms = 10_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const hang = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('hung')), ms)));
  return Promise.race([p, hang]).finally(() => clearTimeout(timer));
}

async function settle(ps: Promise<unknown>[]): Promise<(TandemError | undefined)[]> {
  const rs = await bounded(Promise.allSettled(ps));
  return rs.map((r) => (r.status === 'rejected' ? (r.reason as TandemError) : undefined));
}

async function world(size: number, graph: 'mesh' | 'line' | 'star' = 'mesh'): Promise<Communicator[]> {
  return createLocalWorld(size, { graph, timeoutMs: 30_000 });
}

async function closeAll(comms: Communicator[]): Promise<void> {
  await bounded(Promise.all(comms.map((c) => c.close())));
}

test('mismatched count, dtype, op and collective fail with COLL_MISMATCH on every rank, then fail fast', async () => {
  const cases: [string, (c: Communicator) => Promise<unknown>][] = [
    ['count', (c) => c.allReduce(new Float32Array(c.rank === 1 ? 8 : 7))],
    ['dtype', (c) => (c.rank === 0 ? c.allReduce(new Int32Array(4)) : c.allReduce(new Float32Array(4)))],
    ['op', (c) => c.allReduce(new Float32Array(4), { op: c.rank === 2 ? 'max' : 'sum' })],
    [
      'collective',
      (c) => (c.rank === 0 ? c.broadcast(new Float32Array(4), 0) : c.allReduce(new Float32Array(4))),
    ],
  ];
  for (const [what, call] of cases) {
    const comms = await world(3);
    let errors: (TandemError | undefined)[] = [];
    let later: (TandemError | undefined)[] = [];
    try {
      errors = await settle(comms.map(call));
      later = await settle(comms.map((c) => c.barrier()));
    } finally {
      await closeAll(comms);
    }
    // ranks that receive a foreign header detect the mismatch; a rank that only sent (a
    // broadcast root) may finish, and its next call fails fast
    for (const e of errors) if (e) assert.equal(e.code, 'COLL_MISMATCH', `${what}: ${e.message}`);
    assert.ok(errors.filter((e) => e).length >= 1, `${what}: detected`);
    assert.ok(
      errors.some((e) => /called .* but rank \d+ sent/.test(e?.message ?? '')),
      `${what}: the message names both calls`,
    );
    // a rank whose call completed may start the next one before the abort notice arrives:
    // it then meets the stale message itself and reports the mismatch
    for (const e of later)
      assert.ok(e?.code === 'COLL_ABORTED' || e?.code === 'COLL_MISMATCH', `${what}: later call: ${e?.code}`);
  }
});

test('abort() from another task ends a pending call on every rank with COLL_ABORTED', async () => {
  const comms = await world(4);
  // rank 3 never joins the all-reduce, so the others wait until the abort
  const pending = comms.slice(0, 3).map((c) => c.allReduce(new Float32Array(100)));
  setTimeout(() => comms[1]!.abort('test'), 20);
  const errors = await settle(pending);
  for (const e of errors) assert.equal(e?.code, 'COLL_ABORTED');
  const [later] = await settle([comms[3]!.allReduce(new Float32Array(1))]);
  assert.equal(later?.code, 'COLL_ABORTED', 'the abort notice reached the idle rank too');
  await closeAll(comms);
});

test('a lost peer fails every survivor with COLL_PEER_LOST naming it, also across relays', async () => {
  const comms = await world(5, 'line');
  await Promise.all(comms.map((c) => c.allReduce(new Float32Array(10))));
  // rank 2 sits in the middle of the line: its connections die without a goodbye
  const pending = [0, 1, 3, 4].map((r) => comms[r]!.allReduce(new Float32Array(1000), { algorithm: 'ring' }));
  await comms[2]!.router.close();
  const errors = await settle(pending);
  for (const e of errors) {
    assert.equal(e?.code, 'COLL_PEER_LOST', e?.message);
    assert.equal(e?.details.rank, 2, e?.message);
    // the fabric's own words travel with the loss, also to the ranks told by a notice
    assert.match(e?.message ?? '', /\(peer_lost: peer closed the connection\)/);
  }
  await closeAll(comms);
});

test('a call that one rank never makes times out with COLL_TIMEOUT instead of hanging', async () => {
  const comms = await createLocalWorld(2, { timeoutMs: 300 });
  const [e] = await settle([comms[0]!.allReduce(new Float32Array(4))]);
  assert.equal(e?.code, 'COLL_TIMEOUT');
  assert.match(e?.message ?? '', /rank 1/);
  await closeAll(comms);
});

test('bad arguments are rejected with COLL_BAD_ARGUMENT before anything is sent', async () => {
  const comms = await world(2);
  const c = comms[0]!;
  for (const p of [
    c.allReduce(new Uint16Array(4)),
    c.allReduce(new Int32Array(4), { wire: 'q8' }),
    c.broadcast(new Float32Array(1), 5),
    c.allToAll(new Float32Array(3), [1, 1]),
    c.send(0, new Float32Array(1)),
    c.allReduce(new Float32Array(64), { wire: 'q8', algorithm: 'rhd' }),
  ]) {
    const [e] = await settle([p]);
    assert.equal(e?.code, 'COLL_BAD_ARGUMENT', e?.message);
  }
  await Promise.all(comms.map((x) => x.allReduce(new Float32Array(2))));
  await closeAll(comms);
});
