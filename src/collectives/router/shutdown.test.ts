import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Communicator } from '../communicator.js';
import { createLocalWorld } from '../local-world.js';
import type { Router } from './router.js';

/** The router under a communicator: the shutdown protocol is the router's, tested on its own. */
const routerOf = (c: Communicator): Router => c.router;

test('shutdown: a rank whose neighbours all said goodbye still relays between ranks that have not', async () => {
  // Line 0-1-2-3-4-5, plus the rendezvous connections from rank 0 (the root) to every rank
  // (links, but off every route). Ranks 0, 2, 3 and 4 leave first: every connection of rank 3
  // then leads to a rank that said goodbye, yet rank 1's message to rank 5 must still pass
  // through it. Lingering only until the neighbours were gone closed rank 3 here, and rank 5
  // waited out its timeout.
  const world = await createLocalWorld(6, { graph: 'line', timeoutMs: 5000 });
  const routers = world.map(routerOf);
  try {
    const started = performance.now();
    const leaving = [0, 2, 3, 4].map((r) => routers[r]?.shutdown(5000));
    await new Promise((r) => setTimeout(r, 300)); // their goodbyes have all arrived
    const data = Float32Array.from({ length: 1000 }, (_, i) => i * 0.5);
    const into = new Float32Array(1000);
    await Promise.all([world[1]?.send(5, data), world[5]?.recv(1, into)]);
    assert.deepEqual(into, data, 'rank 5 got rank 1 message through the leaving middle');
    await Promise.all([...leaving, routers[1]?.shutdown(5000), routers[5]?.shutdown(5000)]);
    // a lost relay waits out the 5 s timeout; a working goodbye is done in milliseconds
    const ms = performance.now() - started;
    assert.ok(ms < 2500, `every rank closed after ${Math.round(ms)} ms`);
  } finally {
    await Promise.all(world.map((c) => c.close()));
  }
});

test('shutdown: a neighbour whose connection ends without a goodbye counts as gone', async () => {
  // Line 0-1-2-3 (with the root's links 0-2 and 0-3): rank 3 closes at once, without a
  // goodbye, as a process killed mid-close would. Ranks 0 and 2 see its connection end; rank 1
  // is not linked to it. None may wait out its timeout for it.
  const world = await createLocalWorld(4, { graph: 'line', timeoutMs: 5000 });
  const routers = world.map(routerOf);
  try {
    const started = performance.now();
    await routers[3]?.close();
    await Promise.all([0, 1, 2].map((r) => routers[r]?.shutdown(5000)));
    const ms = performance.now() - started;
    assert.ok(ms < 2500, `the other ranks closed after ${Math.round(ms)} ms`);
  } finally {
    await Promise.all(world.map((c) => c.close()));
  }
});
