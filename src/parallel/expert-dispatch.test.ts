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

// n = 7: routed whole on every rank (a small batch, routesLocally); n = 11: the routing travels
for (const [direct, n] of [
  [false, 7],
  [true, 7],
  [false, 11],
  [true, 11],
] as const)
  test(`dispatch${direct ? ' (direct exchange)' : ''}, ${n} tokens: each expert runs once on its own rank's rows of every token routed to it, ascending; every rank gets the whole batch's routing and outputs; bytes are metered`, async () => {
    // 3 ranks, 6 experts (2 each), width 4; shares of 7 tokens 3, 2, 2 and of 11 4, 4, 3 (share()).
    const size = 3;
    const width = 4;
    const used = 2;
    const owners = Int32Array.of(0, 0, 1, 1, 2, 2);
    // token t goes to experts (t % 6) and ((t * 5 + 1) % 6), distinct for every t here
    const choice = (t: number): number[] => [t % 6, (t * 5 + 1) % 6];
    const weight = (t: number, j: number): number => Math.fround(0.25 + t / 16 + j / 32);
    const rows = new Float32Array(n * width);
    for (let t = 0; t < n; t++) for (let i = 0; i < width; i++) rows[t * width + i] = t + i / 8;
    const routing = { ids: new Int32Array(n * used), weights: new Float32Array(n * used) };
    for (let t = 0; t < n; t++)
      for (let j = 0; j < used; j++) {
        routing.ids[t * used + j] = choice(t)[j]!;
        routing.weights[t * used + j] = weight(t, j);
      }
    const world = await createLocalWorld(size, { timeoutMs: 10_000 });
    const ex = await exchanges(world, direct);
    try {
      const calls: { rank: number; expert: number; tokens: number[] }[] = [];
      const meters = world.map(() => new CommMeter());
      const results = await Promise.all(
        world.map(async (w, r) => {
          const d = new CollectiveExpertDispatch(w, owners, meters[r]!, ex[r]);
          const { start, end } = d.share(n);
          const local = d.routesLocally(n);
          const all = await d.dispatch(
            {
              rows,
              n,
              ids: routing.ids.subarray(start * used, end * used),
              weights: routing.weights.subarray(start * used, end * used),
              used,
              width,
              ...(local ? { routing } : {}),
            },
            (e, xs, out, count) => {
              calls.push({
                rank: r,
                expert: e,
                tokens: Array.from({ length: count }, (_, i) => xs[i * width] as number),
              });
              for (let i = 0; i < count * width; i++) out[i] = (xs[i] as number) * 10 + e;
            },
          );
          return {
            local,
            ids: Int32Array.from(all.ids),
            weights: Float32Array.from(all.weights),
            y: Float32Array.from(all.y),
            at: Int32Array.from(all.at),
          };
        }),
      );
      assert.deepEqual(
        results.map((r) => r.local),
        [n <= 8, n <= 8, n <= 8],
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
      const ran = [0, 0, 0];
      for (let t = 0; t < n; t++) for (const e of choice(t)) ran[owners[e]!]!++;
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
      // routed locally: only the outputs (a header of 3, then rows padded to every choice's);
      // else the routing (a fingerprint, then ids and weights padded to the largest share),
      // then the outputs padded to the busiest rank's; every part to every peer
      const largestShare = Math.ceil(n / size) * used;
      const bytes =
        n <= 8
          ? 4 * (size - 1) * (3 + n * used * width)
          : 4 * (size - 1) * (1 + 2 * largestShare + 3 + Math.max(...ran) * width);
      for (let r = 0; r < size; r++) assert.equal(meters[r]!.bytes, bytes, `rank ${r}: routing and outputs`);
    } finally {
      await Promise.all(ex.map((e) => e?.close()));
      await Promise.all(world.map((w) => w.close()));
    }
  });

test("a rank that routes a small batch differently: the group shares the routing from then on, with the router's outputs", async () => {
  const size = 3;
  const width = 2;
  const used = 1;
  const n = 3;
  const owners = Int32Array.of(0, 1, 2);
  const rows = Float32Array.from({ length: n * width }, (_, i) => i + 1);
  // the share owners' routing: token t to expert t, weight 0.5; rank 1 believes token 0's weight is 0.75
  const truth = { ids: Int32Array.of(0, 1, 2), weights: Float32Array.of(0.5, 0.5, 0.5) };
  const world = await createLocalWorld(size, { timeoutMs: 10_000 });
  try {
    const meters = world.map(() => new CommMeter());
    const outcomes = await Promise.all(
      world.map(async (w, r) => {
        const d = new CollectiveExpertDispatch(w, owners, meters[r]!);
        const mine = r === 1 ? { ids: truth.ids, weights: Float32Array.of(0.75, 0.5, 0.5) } : truth;
        const { start, end } = d.share(n);
        const before = d.routesLocally(n);
        const all = await d.dispatch(
          {
            rows,
            n,
            ids: mine.ids.subarray(start, end),
            weights: mine.weights.subarray(start, end),
            used,
            width,
            routing: mine,
          },
          (e, xs, out) => out.set(xs.map((v) => v * 10 + e)),
        );
        return { before, after: d.routesLocally(n), weights: Float32Array.from(all.weights) };
      }),
    );
    for (const o of outcomes) {
      assert.equal(o.before, true);
      assert.equal(o.after, false, 'every rank shares the routing from now on');
      assert.deepEqual(o.weights, truth.weights, "the share owners' routing");
    }
  } finally {
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
          routing: { ids: Int32Array.of(1), weights: Float32Array.of(1) },
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
