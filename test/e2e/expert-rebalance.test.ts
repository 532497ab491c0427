import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ClusterSlotModel, ServingCluster, startCluster } from '../../src/cluster/index.js';
import { configFromMetadata, GgufModelFile, Model, type ModelConfig } from '../../src/engine/index.js';
import { greedy } from '../../src/engine/generate/generate.js';
import { tempModel } from '../../src/engine/testing/temp-model.js';
import { SKEWED_MOE, SKEWED_PROMPT } from './parallel-models.js';
import { createKernels } from '../../src/kernels/index.js';
import { layersMaxNodeShare } from '../../src/parallel/index.js';
import { layerPlacements } from '../../src/cluster/expert-rebalance.js';

/*
 * Experts re-placed while a stream decodes, over 3 local nodes on shm: the stream's steps go
 * on while the members load their new experts, every member switches at one step boundary,
 * and the greedy tokens are one node's throughout.
 */

const path = tempModel('tandem-expert-rebalance-', SKEWED_MOE);
const prompt = SKEWED_PROMPT;
const steps = 16;

/** One process's greedy tokens, on the kernels a node runs. */
async function oneNode(): Promise<number[]> {
  const kernels = await createKernels({ threads: 1 });
  const file = GgufModelFile.open(path());
  try {
    const m = await Model.load(file, kernels);
    const cache = m.newSession({ contextLength: prompt.length + steps + 1 });
    const out = [greedy(await m.forward(prompt, cache))];
    while (out.length < steps) out.push(greedy(await m.forward([out[out.length - 1]!], cache)));
    return out;
  } finally {
    file.close();
    await kernels.close();
  }
}

test("experts re-placed by the members counters while a greedy stream decodes: the stream goes on, every member switches at one step, the tokens are one node's", async () => {
  const expected = await oneNode();
  const cluster = await startCluster({
    model: path(),
    nodes: 3,
    parallel: 'ep',
    provider: 'shm',
    threads: 1,
    contextLength: 64,
  });
  const serving = new ServingCluster(cluster.session, cluster.placement, cluster.load);
  try {
    const model = new ClusterSlotModel(serving, configOf(), 64);
    const seq = model.newSession();
    const tokens = [(await model.forward(prompt, seq, 'argmax')) as number];
    const before = cluster.session.placement!.plan;
    let rebalance: ReturnType<ServingCluster['rebalanceExperts']> | undefined;
    let stepsWhileReplacing = 0;
    let replacing = false;
    while (tokens.length < steps) {
      // after a few steps the counters hold the prompt's routing: re-place, and keep decoding
      if (tokens.length === 3) {
        replacing = true;
        rebalance = serving.rebalanceExperts().finally(() => (replacing = false));
      }
      const [token] = await model.forwardBatch([tokens[tokens.length - 1]!], [seq], ['argmax']);
      if (replacing) stepsWhileReplacing++;
      tokens.push(token as number);
    }
    const report = await rebalance!;
    assert.ok(report.switched, report.reason);
    assert.ok(report.after < report.before, `${report.after} < ${report.before}`);
    const after = cluster.session.placement!.plan;
    assert.notDeepEqual(
      after.ranks.map((r) => r.shard.layerExperts),
      before.ranks.map((r) => r.shard.layerExperts),
      'the members hold other experts',
    );
    assert.ok(after.ranks.every((r) => r.shard.layerExperts?.length === before.ranks[0]!.shard.layers.end));
    assert.equal(
      layersMaxNodeShare(layerPlacements(after, report.profile)).toFixed(6),
      report.after.toFixed(6),
    );
    assert.deepEqual(tokens, expected, 'greedy tokens across the switch equal one node');
    assert.equal(model.heals.length, 0, 'no step failed or was replayed');
    const event = serving.view().events.find((e) => e.kind === 'experts');
    assert.match(event?.message ?? '', /re-placed per layer while serving/);
    process.stderr.write(`# ${stepsWhileReplacing} decode step(s) ran while the experts were re-placed\n`);
    // a second pass on the same routing finds nothing worth moving
    const again = await serving.rebalanceExperts({ profile: report.profile });
    assert.equal(again.switched, false, again.reason);
  } finally {
    serving.close();
    await cluster.close();
  }
});

function configOf(): ModelConfig {
  const file = GgufModelFile.open(path());
  try {
    return configFromMetadata((k) => file.meta(k), new Map([...file.tensors].map(([n, t]) => [n, t.dims])));
  } finally {
    file.close();
  }
}
