import { test } from 'node:test';
import assert from 'node:assert/strict';
import { dtypes, type DType } from '../kernels/dtype.js';
import { algorithms, Call, type Algorithm } from './call.js';
import type { Communicator } from './communicator.js';
import { createCommunicator, mayBusyPoll } from './create-communicator.js';
import {
  assertReduced,
  checkAllGather,
  checkAllToAll,
  checkBroadcast,
  checkReduceScatter,
  runAllReduce,
  type ReduceName,
} from './collectives.cases.js';
import type { TopologyKind } from './graph.js';
import { createLocalWorld } from './local-world.js';

/** The collectives matrix on the loopback provider, every rank in this process. */

const ops: ReduceName[] = ['sum', 'max', 'min', 'mean'];

async function withWorld(
  size: number,
  graph: TopologyKind,
  body: (comms: Communicator[]) => Promise<void>,
): Promise<void> {
  const comms = await createLocalWorld(size, { graph, timeoutMs: 20_000 });
  try {
    await body(comms);
  } finally {
    await Promise.all(comms.map((c) => c.close()));
  }
}

test('all-reduce: sizes 1..8 x counts 0,1,7,4096 x every dtype, op and algorithm on a full mesh', async () => {
  for (let size = 1; size <= 8; size++) {
    await withWorld(size, 'mesh', async (comms) => {
      for (const count of [0, 1, 7, 4096]) {
        for (const dtype of dtypes) {
          for (const op of ops) {
            for (const algorithm of algorithms) {
              if (count === 4096 && op !== 'sum' && dtype !== 'f32' && algorithm !== 'ring') continue; // keep it fast: every op still runs per dtype at 7 and 4096 (ring)
              const out = await runAllReduce(comms, dtype, count, op, algorithm);
              assertReduced(out, op, dtype, size, `size ${size} count ${count} ${dtype} ${op} ${algorithm}`);
            }
          }
        }
      }
    });
  }
});

test('all-reduce of 1,000,003 values: every algorithm on 3 ranks, ring and rhd on 8, f32 sum and bf16 max', async () => {
  for (const size of [3, 8]) {
    await withWorld(size, 'mesh', async (comms) => {
      for (const algorithm of size === 3 ? algorithms : (['ring', 'rhd'] as const)) {
        const cases: [DType, ReduceName][] =
          size === 3 && algorithm === 'ring'
            ? [
                ['f32', 'sum'],
                ['bf16', 'max'],
              ]
            : [['f32', 'sum']];
        for (const [dtype, op] of cases) {
          const out = await runAllReduce(comms, dtype, 1_000_003, op, algorithm);
          assertReduced(out, op, dtype, size, `size ${size} 1,000,003 ${dtype} ${op} ${algorithm}`);
        }
      }
    });
  }
});

test('ring, line and star topologies: every algorithm works (pairs without a link are relayed)', async () => {
  for (const graph of ['ring', 'line', 'star'] as const) {
    for (const size of [2, 3, 5, 8]) {
      await withWorld(size, graph, async (comms) => {
        for (const algorithm of [...algorithms, undefined]) {
          for (const count of [1, 7, 4096]) {
            const what = `${graph} size ${size} count ${count} ${algorithm ?? 'auto'}`;
            assertReduced(
              await runAllReduce(comms, 'f32', count, 'sum', algorithm),
              'sum',
              'f32',
              size,
              what,
            );
            await checkAllGather(comms, 'f16', count, algorithm, `all-gather ${what}`);
            await checkReduceScatter(comms, 'i32', count, 'max', algorithm, `reduce-scatter ${what}`);
            await checkBroadcast(comms, 'bf16', count, size - 1, algorithm, `broadcast ${what}`);
          }
        }
        await checkAllToAll(comms, 5, true, `all-to-all ${graph} ${size}`);
        if (graph === 'star' && size > 2)
          assert.ok(comms[0]!.relayed > 0, 'the hub relayed fragments between leaves');
        if (graph === 'line' && size > 2)
          assert.ok(
            comms.slice(1, -1).some((c) => c.relayed > 0),
            'inner ranks of a line relayed',
          );
      });
    }
  }
});

test('all-gather, reduce-scatter, broadcast, all-to-all: sizes 1..8, counts 0,1,7,4096, every algorithm', async () => {
  for (let size = 1; size <= 8; size++) {
    await withWorld(size, 'mesh', async (comms) => {
      for (const algorithm of [...algorithms, undefined] as (Algorithm | undefined)[]) {
        for (const count of [0, 1, 7, 4096]) {
          const what = `size ${size} count ${count} ${algorithm ?? 'auto'}`;
          for (const dtype of ['f32', 'bf16'] as const)
            await checkAllGather(comms, dtype, count, algorithm, `all-gather ${dtype} ${what}`);
          for (const op of ops)
            await checkReduceScatter(
              comms,
              op === 'sum' ? 'f16' : 'f32',
              count,
              op,
              algorithm,
              `reduce-scatter ${op} ${what}`,
            );
          for (const root of new Set([0, size - 1]))
            await checkBroadcast(comms, 'i32', count, root, algorithm, `broadcast root ${root} ${what}`);
        }
      }
      await checkAllToAll(comms, 0, true, `all-to-all empty ${size}`);
      await checkAllToAll(comms, 3, true, `all-to-all ${size}`);
      await checkAllToAll(comms, 1000, false, `all-to-all exchanged counts ${size}`);
    });
  }
});

test('large reduce-scatter, all-gather and broadcast of 1,000,003 values', async () => {
  await withWorld(5, 'mesh', async (comms) => {
    for (const algorithm of ['ring', 'rhd', 'mesh'] as const)
      await checkReduceScatter(comms, 'f32', 1_000_003, 'sum', algorithm, `reduce-scatter ${algorithm}`);
    await checkAllGather(comms, 'f32', 1_000_003, 'ring', 'all-gather ring');
    for (const algorithm of ['ring', 'tree'] as const)
      await checkBroadcast(comms, 'f32', 1_000_003, 2, algorithm, `broadcast ${algorithm}`);
  });
});

test('waits busy-poll only when every compute thread of the host has a core', () => {
  assert.equal(mayBusyPoll(2, 1, 2), true);
  assert.equal(mayBusyPoll(1, 2, 2), true);
  assert.equal(mayBusyPoll(3, 1, 2), false, 'more ranks than cores');
  assert.equal(mayBusyPoll(2, 2, 2), false, 'two nodes whose threads default to every core oversubscribe');
  assert.equal(mayBusyPoll(2, 0, 2), true, 'no thread count counts as one');
});

test('a call that drives progress has its receive delivered before it yields (no turn of the event loop)', async (t) => {
  if (!mayBusyPoll(2, 1)) return t.skip('the router drives progress only with a core per rank');
  // two ranks over shm in this process: a shm ring is read by polling, as on separate hosts
  let listening: (address: string) => void = () => undefined;
  const address = new Promise<string>((resolve) => (listening = resolve));
  const root = createCommunicator({
    rank: 0,
    size: 2,
    provider: 'shm',
    rendezvous: { kind: 'root', address: '127.0.0.1:0' },
    timeoutMs: 5_000,
    onListening: listening,
  });
  const other = address.then((a) =>
    createCommunicator({
      rank: 1,
      size: 2,
      provider: 'shm',
      rendezvous: { kind: 'root', address: a },
      timeoutMs: 5_000,
    }),
  );
  const world = await Promise.all([root, other]);
  try {
    const spec = {
      op: 'send-recv',
      dtype: 'f32',
      reduce: 'none',
      q8: false,
      algorithm: 'none',
      count: 4,
      seq: 7,
      aux: 0,
      channel: 0,
    } as const;
    const [a, b] = world.map((c) => new Call(c, spec)) as [Call, Call];
    const bytes = (...v: number[]): Uint8Array => new Uint8Array(Float32Array.from(v).buffer);
    const first = new Float32Array(4);
    void b.send(0, bytes(1, 2, 3, 4));
    await a.recvCopy(1, first); // delivered by the pump
    assert.deepEqual([...first], [1, 2, 3, 4]);
    // from here to the checks nothing yields, so nothing but this call can poll
    void b.send(0, bytes(5, 6, 7, 8));
    const driven = new Float32Array(4);
    const p = a.recvCopy(1, driven);
    assert.deepEqual([...driven], [0, 0, 0, 0], 'not delivered before anyone polls');
    void a.drive(p);
    assert.deepEqual([...driven], [5, 6, 7, 8], 'delivered inside drive()');
    await p;
  } finally {
    await Promise.all(world.map((w) => w.close()));
  }
});

test('over tcp an idle pump parks on a timer; a call wakes it and completes, even when its peer starts later', async () => {
  let listening: (address: string) => void = () => undefined;
  const address = new Promise<string>((resolve) => (listening = resolve));
  const root = createCommunicator({
    rank: 0,
    size: 2,
    provider: 'tcp',
    rendezvous: { kind: 'root', address: '127.0.0.1:0' },
    timeoutMs: 10_000,
    onListening: listening,
  });
  const other = address.then((a) =>
    createCommunicator({
      rank: 1,
      size: 2,
      provider: 'tcp',
      rendezvous: { kind: 'root', address: a },
      timeoutMs: 10_000,
    }),
  );
  const world = await Promise.all([root, other]);
  const parked = (c: Communicator): boolean =>
    (c as unknown as { router: { parked?: unknown } }).router.parked !== undefined;
  try {
    const vec = (rank: number): Float32Array =>
      Float32Array.from({ length: 100_000 }, (_, i) => rank + (i % 7));
    const check = (x: Float32Array): void => {
      for (let i = 0; i < x.length; i++) if (x[i] !== 1 + 2 * (i % 7)) assert.fail(`element ${i} is ${x[i]}`);
    };
    const xs = [vec(0), vec(1)];
    await Promise.all(world.map((c, r) => c.allReduce(xs[r]!)));
    xs.forEach(check);
    const deadline = Date.now() + 10_000;
    while (!world.every(parked) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.ok(world.every(parked), 'both pumps parked after a second of idleness');
    // rank 0 calls while rank 1 is still parked and idle; rank 1 joins 100 ms later
    const ys = [vec(0), vec(1)];
    const first = world[0]!.allReduce(ys[0]!);
    assert.ok(!parked(world[0]!), 'the call woke its pump');
    await new Promise((r) => setTimeout(r, 100));
    await Promise.all([first, world[1]!.allReduce(ys[1]!)]);
    ys.forEach(check);
  } finally {
    await Promise.all(world.map((w) => w.close()));
  }
});
