import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createLocalWorld } from '../collectives/local-world.js';
import { createKernels, ReferenceKernels, type Kernels } from '../kernels/index.js';
import { Model } from '../engine/model/model.js';
import { tinyModelFile } from '../engine/model/tiny-model.js';
import { buildPlan, type ParallelKind } from './plan.js';
import { loadRank, type LoadedRank } from './rank.js';
import {
  forwardBatchOnRank,
  forwardMixedOnRank,
  forwardOnRank,
  logitsRank,
  runsMixedInOnePass,
} from './serving-step.js';

/*
 * A serving step that carries a prompt piece and decode rows (what a coordinator sends as
 * `forward-mixed`) gives, on the logits rank, bit for bit the logits of the piece's forward
 * followed by the rows' decode step, in one pass or two, on tensor-parallel ranks and on
 * pipeline stages: a cluster's replay refills the caches with those two forwards.
 */

const file = tinyModelFile({
  arch: 'llama',
  heads: 4,
  kvHeads: 2,
  width: 64,
  ff: 96,
  layers: 2,
  vocab: 96,
  seed: 9,
});
let wasm: Kernels;
before(async () => {
  wasm = await createKernels({ backend: 'wasm', threads: 1 });
});
after(() => wasm.close());

async function loadRanks(
  kind: ParallelKind,
  kernels: Kernels,
): Promise<{ ranks: LoadedRank[]; close: () => Promise<void> }> {
  const model = await Model.load(file, kernels);
  const plan = buildPlan(model.config, file.tensors, { kind, nodes: 2 });
  const world = await createLocalWorld(plan.nodes, { timeoutMs: 10_000 });
  const ranks = await Promise.all(world.map((w) => loadRank({ file, kernels, plan, world: w })));
  return { ranks, close: async () => void (await Promise.all(world.map((w) => w.close()))) };
}

const piece = Array.from({ length: 15 }, (_, j) => (j * 7 + 3) % 96);
const prompts = [
  [5, 9, 14],
  [40, 2, 77, 31, 8],
];
const next = [11, 60];

/** Every rank's answer to one step: its caches' prompts in, then `step`; the logits rank's rows. */
async function run(
  ranks: LoadedRank[],
  step: (
    r: LoadedRank,
    caches: ReturnType<LoadedRank['model']['newSession']>[],
  ) => Promise<Float32Array[] | undefined>,
): Promise<Float32Array[]> {
  const out = await Promise.all(
    ranks.map(async (r) => {
      const caches = [0, 1, 2].map(() => r.model.newSession({ contextLength: 64 }));
      for (const [i, p] of prompts.entries()) await forwardOnRank(r, caches[i]!, p);
      return step(r, caches);
    }),
  );
  const rows = out[logitsRank(ranks[0]!.plan)];
  assert.ok(rows, 'the logits rank answers');
  return rows;
}

for (const kind of ['tp', 'pp'] as const) {
  for (const onePass of [true, false]) {
    test(`${kind} on 2 ranks, ${onePass ? 'one pass' : 'piece then rows'}: a mixed step equals the piece's forward and the rows' decode step`, async () => {
      const { ranks, close } = await loadRanks(kind, wasm);
      try {
        assert.ok(ranks.every(runsMixedInOnePass), 'one pass on a single stage and on a pipeline');
        const want = await run(ranks, async (r, c) => {
          const first = await forwardOnRank(r, c[2]!, piece);
          const rows = await forwardBatchOnRank(r, [c[0]!, c[1]!], next);
          return first && rows ? [first, ...rows] : undefined;
        });
        const got = await run(ranks, (r, c) =>
          forwardMixedOnRank(
            r,
            { tokens: piece, cache: c[2]! },
            { tokens: next, caches: [c[0]!, c[1]!] },
            onePass,
          ),
        );
        assert.equal(got.length, 3);
        assert.deepEqual(got, want);
      } finally {
        await close();
      }
    });
  }
}

test('ranks on kernels without matmulPlusRows do not run a mixed step in one pass', async () => {
  const { ranks, close } = await loadRanks('tp', new ReferenceKernels());
  try {
    assert.ok(!ranks.some(runsMixedInOnePass));
  } finally {
    await close();
  }
});
