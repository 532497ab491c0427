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
  test(`dispatch${direct ? ' (direct exchange)' : ''}: each expert runs once on every token routed to it, ascending; outputs come back to their tokens; bytes are metered`, async () => {
    // 3 ranks, 6 experts (2 each), width 4; global tokens 0..6 (shares 3, 2, 2 -> see share()).
    const size = 3;
    const width = 4;
    const used = 2;
    const owners = Int32Array.of(0, 0, 1, 1, 2, 2);
    const n = 7;
    // token t goes to experts (t % 6) and ((t * 5 + 1) % 6), distinct for every t here
    const choice = (t: number): number[] => [t % 6, (t * 5 + 1) % 6];
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
          const rows = new Float32Array(m * width);
          const ids = new Int32Array(m * used);
          for (let t = start; t < end; t++) {
            for (let i = 0; i < width; i++) rows[(t - start) * width + i] = t + i / 8;
            ids.set(choice(t), (t - start) * used);
          }
          const y = await d.dispatch({ rows, ids, tokens: m, used, width }, (e, xs, out, count) => {
            calls.push({
              rank: r,
              expert: e,
              tokens: Array.from({ length: count }, (_, i) => xs[i * width] as number),
            });
            for (let i = 0; i < count * width; i++) out[i] = (xs[i] as number) * 10 + e;
          });
          return { start, end, y: Float32Array.from(y), ids };
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
      let remoteOut = [0, 0, 0];
      let remoteBack = [0, 0, 0];
      for (const [r, res] of results.entries()) {
        for (let t = res.start; t < res.end; t++) {
          for (let j = 0; j < used; j++) {
            const e = res.ids[(t - res.start) * used + j] as number;
            for (let i = 0; i < width; i++)
              assert.equal(
                res.y[((t - res.start) * used + j) * width + i],
                Math.fround(Math.fround(t + i / 8) * 10 + e),
              );
            if (owners[e] !== r) {
              remoteOut = remoteOut.map((v, k) => (k === r ? v + 1 : v));
              remoteBack = remoteBack.map((v, k) => (k === owners[e] ? v + 1 : v));
            }
          }
        }
      }
      // counts to every peer, then rows out and outputs back: only a peer's own through the
      // all-to-all; all of them, padded to the largest rank's, to every peer through the exchange
      const mostOut = Math.max(...remoteOut);
      const mostBack = Math.max(...remoteBack);
      for (let r = 0; r < size; r++)
        assert.equal(
          meters[r]!.bytes,
          4 * size * (size - 1) +
            (direct
              ? 4 * (size - 1) * ((width + 1) * mostOut + width * mostBack)
              : 4 * (width + 1) * remoteOut[r]! + 4 * width * remoteBack[r]!),
          `rank ${r}: counts, rows sent and outputs returned`,
        );
    } finally {
      await Promise.all(ex.map((e) => e?.close()));
      await Promise.all(world.map((w) => w.close()));
    }
  });

test('ranks that disagree on who holds an expert fail at once with PAR_EXCHANGE / COLL_ABORTED, never hang', async () => {
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
          rows: new Float32Array(m * 2),
          ids: Int32Array.from(m ? [1] : []),
          tokens: m,
          used: 1,
          width: 2,
        };
        return d.dispatch(request, (_e, xs, out) => out.set(xs));
      }),
    );
    assert.ok(outcomes.every((o) => o.status === 'rejected'));
    const codes = outcomes.map((o) =>
      o.status === 'rejected' && isTandemError(o.reason) ? o.reason.code : undefined,
    );
    assert.deepEqual(codes, ['COLL_ABORTED', 'PAR_EXCHANGE']);
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
