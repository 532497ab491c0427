import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createLocalWorld } from '../collectives/local-world.js';
import { greedyPick } from '../engine/sampling/index.js';
import { CollectiveShardComm } from './shard-comm.js';

/*
 * planLogits: a serving step tells each rank of the head's group what its rows need, and the
 * gathers follow it call by call: whole logits, each rank's best alone (whose argmax is the
 * row's), or nothing; calls past the plan gather as the comm was built to.
 */

test("the head's gathers follow the step's plan: whole logits, the argmax alone, nothing", async () => {
  const vocab = 7;
  // a row per call; ties across ranks (rows 1 and 2): the lowest id wins, as greedyPick's
  const rows = [
    [0.5, -1, 2, 3, 0, 1, -2],
    [4, 1, 0, 4, 4, -1, 0],
    [-1, 6, -3, 6, 0, 2, 6],
    [1, 2, 3, 4, 5, 6, 7],
  ].map((r) => Float32Array.from(r));
  const world = await createLocalWorld(2, { timeoutMs: 10_000 });
  try {
    const out = await Promise.all(
      world.map(async (w) => {
        const comm = new CollectiveShardComm(w);
        const start = Math.floor((vocab * w.rank) / 2);
        const end = Math.floor((vocab * (w.rank + 1)) / 2);
        comm.planLogits(['argmax', 'none', 'logits']);
        const got: Float32Array[] = [];
        for (const row of rows) {
          const full = new Float32Array(vocab).fill(99);
          await comm.allGatherLogits(row.slice(start, end), full);
          got.push(full);
        }
        return got;
      }),
    );
    for (const got of out) {
      // 'argmax': each rank's best alone, -Infinity elsewhere; its pick is the row's
      assert.deepEqual([...got[0]!], [-Infinity, -Infinity, 2, 3, -Infinity, -Infinity, -Infinity]);
      assert.equal(greedyPick(got[0]!), greedyPick(rows[0]!));
      // 'none': nothing gathered, the row left as it was
      assert.deepEqual([...got[1]!], new Array<number>(vocab).fill(99));
      // 'logits', and past the plan the comm's own mode (full): every logit
      assert.deepEqual([...got[2]!], [...rows[2]!]);
      assert.deepEqual([...got[3]!], [...rows[3]!]);
    }
    // a tie across the ranks' slices goes to the lowest id, as a greedy sampler picks
    await Promise.all(
      world.map(async (w) => {
        const comm = new CollectiveShardComm(w);
        const start = Math.floor((vocab * w.rank) / 2);
        const end = Math.floor((vocab * (w.rank + 1)) / 2);
        comm.planLogits(['argmax', 'argmax']);
        for (const row of rows.slice(1, 3)) {
          const full = new Float32Array(vocab);
          await comm.allGatherLogits(row.slice(start, end), full);
          assert.equal(greedyPick(full), greedyPick(row));
        }
      }),
    );
    // a NaN in a rank's slice reaches the pick at its own id, and the pick refuses the row
    await Promise.all(
      world.map(async (w) => {
        const comm = new CollectiveShardComm(w);
        comm.planLogits(['argmax']);
        const full = new Float32Array(vocab);
        await comm.allGatherLogits(Float32Array.from(w.rank === 1 ? [1, NaN, 0, 2] : [0, 1, 2]), full);
        assert.throws(() => greedyPick(full), /logit 4 is NaN/);
      }),
    );
  } finally {
    await Promise.all(world.map((w) => w.close()));
  }
});
