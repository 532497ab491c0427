import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Communicator } from '../collectives/communicator.js';
import { createLocalWorld } from '../collectives/local-world.js';
import { isTandemError } from '../errors/index.js';
import { ReferenceKernels, createKernels, type Kernels } from '../kernels/index.js';
import { moeFfn, moeFfnDispatched } from '../engine/model/ffn.js';
import { singleNodeComm } from '../engine/model/comm.js';
import { Model } from '../engine/model/model.js';
import { Scratch } from '../engine/model/scratch.js';
import { fullShard } from '../engine/model/shard.js';
import { tinyModelFile, type TinyModelOptions } from '../engine/model/tiny-model.js';
import { loadShardWeights } from '../engine/model/weights.js';
import { CollectiveExpertDispatch, expertOwners } from './expert-dispatch.js';
import { balanceExperts } from './expert-balance.js';
import { buildPlan } from './plan.js';
import { loadRank } from './rank.js';
import { CollectiveShardComm, CommMeter } from './shard-comm.js';
import { TpExchange } from './tp-exchange.js';

/** Deterministic values in [-2, 2). */
function randomRows(count: number, seed: number): Float32Array {
  let a = seed >>> 0;
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    a = (Math.imul(a, 1664525) + 1013904223) >>> 0;
    out[i] = (a / 4294967296) * 4 - 2;
  }
  return out;
}

/** The group's direct exchanges (as shm nodes have), or none (the communicator's all-to-all). */
async function exchanges(world: Communicator[], direct: boolean): Promise<(TpExchange | undefined)[]> {
  if (!direct) return world.map(() => undefined);
  const o = { provider: 'loopback' as const, host: '127.0.0.1', secret: 's', timeoutMs: 10_000 };
  return Promise.all(world.map((group) => TpExchange.connect({ group, ...o })));
}

// Mixtral-style (4 experts, 2 used) and qwen3moe-style (8 experts, 3 used), no shared expert:
// the whole MoE output is the routed sum, so it must match one node bit for bit.
const models: [string, TinyModelOptions][] = [
  ['mixtral', { arch: 'llama', experts: 4, expertsUsed: 2, layers: 2, width: 32, ff: 40, seed: 11 }],
  [
    'qwen3moe',
    { arch: 'qwen3moe', experts: 8, expertsUsed: 3, layers: 2, width: 64, heads: 4, ff: 48, seed: 12 },
  ],
];

async function checkBitExact(kernels: Kernels, what: string): Promise<void> {
  for (const [name, options] of models) {
    const file = tinyModelFile(options);
    const c = (await Model.load(file, kernels)).config;
    const width = c.embeddingLength;
    const whole = await loadShardWeights(file, kernels, c, fullShard(c));
    for (const [nodes, direct, balanced] of [
      [2, false, false],
      [2, true, false],
      [3, false, false],
      [4, true, false],
      [2, false, true],
      [3, true, true],
    ] as const) {
      // balanced: placed by a skewed load, the hottest experts copied on several ranks
      const loads = Array.from({ length: c.expertCount }, (_, e) => 1 / (e + 1) ** 1.5);
      const expertSets = balanced
        ? balanceExperts(loads, nodes, Math.ceil(c.expertCount / nodes) + 1).perRank
        : undefined;
      if (expertSets) assert.ok(expertSets.flat().length > c.expertCount, 'some expert has a copy');
      const plan = buildPlan(c, file.tensors, { kind: 'ep', nodes, ...(expertSets ? { expertSets } : {}) });
      const owners = expertOwners(plan, 0)!;
      const world = await createLocalWorld(nodes, { timeoutMs: 10_000 });
      const ex = await exchanges(world, direct);
      try {
        const shards = await Promise.all(plan.ranks.map((r) => loadShardWeights(file, kernels, c, r.shard)));
        const dispatch = world.map((w, r) => new CollectiveExpertDispatch(w, owners, new CommMeter(), ex[r]));
        // the MoE layer completes its output itself: every rank's tokens, summed across the group
        const sums = world.map((w) => new CollectiveShardComm(w));
        for (const n of [1, 2, 5, 10]) {
          const x = randomRows(n * width, 100 * nodes + n);
          for (let l = 0; l < c.blockCount; l++) {
            const want = new Float32Array(n * width);
            await moeFfn(kernels, c, whole.layers[l]!.moe!, new Scratch(), x, want, n, singleNodeComm);
            const outs = await Promise.all(
              world.map(async (w, r) => {
                const out = new Float32Array(n * width);
                await moeFfnDispatched(
                  kernels,
                  c,
                  shards[r]!.layers[l]!.moe!,
                  new Scratch(),
                  x,
                  out,
                  n,
                  dispatch[r]!,
                  sums[r]!,
                );
                return out;
              }),
            );
            for (const [r, out] of outs.entries())
              assert.deepEqual(
                out,
                want,
                `${what} ${name}: ep on ${nodes}${direct ? ' (direct)' : ''}${balanced ? ' (balanced, copies)' : ''}, ${n} tokens, layer ${l}, rank ${r}`,
              );
          }
        }
      } finally {
        await Promise.all(ex.map((e) => e?.close()));
        await Promise.all(world.map((w) => w.close()));
      }
    }
  }
}

test('expert-parallel MoE output is the single-node output bit for bit (reference kernels; 2, 3, 4 ranks, all-to-all and direct exchange; 1 to 10 tokens)', () =>
  checkBitExact(new ReferenceKernels(), 'reference'));

test('expert-parallel MoE output is the single-node output bit for bit (fast kernels, 2 threads)', async () => {
  const kernels = await createKernels({ threads: 2 });
  try {
    await checkBitExact(kernels, 'fast');
  } finally {
    await kernels.close?.();
  }
});

for (const direct of [false, true])
  test(`dispatch${direct ? ' (direct exchange)' : ''}: each expert runs once on its own rank's rows of every token routed to it, ascending; every rank gets the whole batch's routing and outputs; bytes are metered`, async () => {
    // 3 ranks, 6 experts (2 each), width 4; global tokens 0..6 (shares 3, 2, 2 -> see share()).
    const size = 3;
    const width = 4;
    const used = 2;
    const owners = Int32Array.of(0, 0, 1, 1, 2, 2);
    const n = 7;
    // token t goes to experts (t % 6) and ((t * 5 + 1) % 6), distinct for every t here
    const choice = (t: number): number[] => [t % 6, (t * 5 + 1) % 6];
    const weight = (t: number, j: number): number => Math.fround(0.25 + t / 16 + j / 32);
    const rows = new Float32Array(n * width);
    for (let t = 0; t < n; t++) for (let i = 0; i < width; i++) rows[t * width + i] = t + i / 8;
    const world = await createLocalWorld(size, { timeoutMs: 10_000 });
    const ex = await exchanges(world, direct);
    try {
      const calls: { rank: number; expert: number; tokens: number[] }[] = [];
      const meters = world.map(() => new CommMeter());
      const results = await Promise.all(
        world.map(async (w, r) => {
          const d = new CollectiveExpertDispatch(w, owners, meters[r]!, ex[r]);
          const { start, end } = d.share(n);
          const m = end - start;
          const ids = new Int32Array(m * used);
          const weights = new Float32Array(m * used);
          for (let t = start; t < end; t++) {
            ids.set(choice(t), (t - start) * used);
            for (let j = 0; j < used; j++) weights[(t - start) * used + j] = weight(t, j);
          }
          const all = await d.dispatch({ rows, n, ids, weights, used, width }, (e, xs, out, count) => {
            calls.push({
              rank: r,
              expert: e,
              tokens: Array.from({ length: count }, (_, i) => xs[i * width] as number),
            });
            for (let i = 0; i < count * width; i++) out[i] = (xs[i] as number) * 10 + e;
          });
          return {
            start,
            end,
            ids: Int32Array.from(all.ids),
            weights: Float32Array.from(all.weights),
            y: Float32Array.from(all.y),
            at: Int32Array.from(all.at),
          };
        }),
      );
      assert.deepEqual(
        results.map((r) => [r.start, r.end]),
        [
          [0, 3],
          [3, 5],
          [5, 7],
        ],
      );
      for (let e = 0; e < 6; e++) {
        const mine = calls.filter((c) => c.expert === e);
        const want = Array.from({ length: n }, (_, t) => t).filter((t) => choice(t).includes(e));
        assert.equal(mine.length, want.length > 0 ? 1 : 0, `expert ${e} runs once`);
        if (want.length > 0) {
          assert.equal(mine[0]!.rank, owners[e], `expert ${e} runs on its owner`);
          assert.deepEqual(mine[0]!.tokens, want, `expert ${e} gets its tokens in ascending order`);
        }
      }
      // every rank: the whole batch's choices, weights and the output of every choice
      let busiest = 0;
      const ran = [0, 0, 0];
      for (let t = 0; t < n; t++) for (const e of choice(t)) ran[owners[e]!]!++;
      busiest = Math.max(...ran);
      for (const [r, res] of results.entries()) {
        for (let t = 0; t < n; t++) {
          for (let j = 0; j < used; j++) {
            const p = t * used + j;
            const e = choice(t)[j]!;
            assert.equal(res.ids[p], e, `rank ${r}: token ${t} slot ${j}`);
            assert.equal(res.weights[p], weight(t, j));
            for (let i = 0; i < width; i++)
              assert.equal(res.y[res.at[p]! + i], Math.fround(Math.fround(t + i / 8) * 10 + e));
          }
        }
      }
      // routing (a fingerprint, then ids and weights padded to the largest share), then outputs
      // (a row count, then rows padded to the busiest rank's), every part to every peer
      const most = 3 * used;
      for (let r = 0; r < size; r++)
        assert.equal(
          meters[r]!.bytes,
          4 * (size - 1) * (1 + 2 * most + 1 + busiest * width),
          `rank ${r}: routing and outputs`,
        );
    } finally {
      await Promise.all(ex.map((e) => e?.close()));
      await Promise.all(world.map((w) => w.close()));
    }
  });

test('ranks that disagree on who holds an expert fail at once with PAR_EXCHANGE, never hang', async () => {
  const world = await createLocalWorld(2, { timeoutMs: 20_000 });
  try {
    const started = Date.now();
    // rank 0 believes expert 1 is on rank 1; rank 1 believes it is on rank 0
    const owners = [Int32Array.of(0, 1), Int32Array.of(1, 0)];
    const outcomes = await Promise.allSettled(
      world.map((w, r) => {
        const d = new CollectiveExpertDispatch(w, owners[r]!, new CommMeter());
        const { start, end } = d.share(1);
        const m = end - start;
        const request = {
          rows: new Float32Array(2),
          n: 1,
          ids: Int32Array.from(m ? [1] : []),
          weights: Float32Array.from(m ? [1] : []),
          used: 1,
          width: 2,
        };
        return d.dispatch(request, (_e, xs, out) => out.set(xs));
      }),
    );
    assert.ok(outcomes.every((o) => o.status === 'rejected'));
    const errors = outcomes.map((o) =>
      o.status === 'rejected' && isTandemError(o.reason) ? o.reason : undefined,
    );
    // each rank finds the other's placement differs (or is aborted by the one that found it first)
    assert.ok(errors.every((e) => e?.code === 'PAR_EXCHANGE' || e?.code === 'COLL_ABORTED'));
    assert.ok(
      errors.some(
        (e) => e?.code === 'PAR_EXCHANGE' && /places the experts of layer 0 differently/.test(e.message),
      ),
    );
    assert.ok(Date.now() - started < 10_000, 'well before the communicator deadline');
  } finally {
    await Promise.all(world.map((w) => w.close()));
  }
});

test('loadRank gives expert-parallel ranks the dispatch and tensor-parallel ranks none', async () => {
  const file = tinyModelFile(models[0]![1]);
  const kernels = new ReferenceKernels();
  const c = (await Model.load(file, kernels)).config;
  for (const kind of ['ep', 'tp'] as const) {
    const plan = buildPlan(c, file.tensors, { kind, nodes: 2 });
    const world = await createLocalWorld(2, { timeoutMs: 10_000 });
    try {
      const ranks = await Promise.all(world.map((w) => loadRank({ file, kernels, plan, world: w })));
      for (const r of ranks)
        assert.equal((r.shardComm as { experts?: unknown }).experts !== undefined, kind === 'ep', kind);
    } finally {
      await Promise.all(world.map((w) => w.close()));
    }
  }
});
