import assert from 'node:assert/strict';
import type { Communicator } from '../collectives/communicator.js';
import type { Kernels } from '../kernels/types.js';
import { Model } from '../engine/model/model.js';
import type { ModelFile } from '../engine/model/model-file.js';
import type { ParallelPlan } from './plan.js';
import type { RankContext } from './runner.js';
import { CollectiveExpertDispatch, expertOwners } from './expert-dispatch.js';
import { CollectiveShardComm, CommMeter } from './shard-comm.js';
import type { WireFormat } from './wire.js';

export interface LoadRankOptions {
  file: ModelFile;
  kernels: Kernels;
  plan: ParallelPlan;
  /** This rank's communicator over every rank of the run (rank = plan rank). */
  world: Communicator;
  wire?: WireFormat;
  /** `argmax` when decoding greedily: the vocabulary-parallel head then exchanges 8 bytes per rank. */
  logits?: 'full' | 'argmax';
}

export type LoadedRank = RankContext & { group: Communicator };

/**
 * Collective over `world`: splits it into tensor-parallel groups (one per pipeline stage)
 * and loads this rank's shard, reading only its slices of the file.
 */
export async function loadRank(o: LoadRankOptions): Promise<LoadedRank> {
  const me = o.plan.ranks[o.world.rank];
  assert.ok(
    me && o.world.size === o.plan.nodes,
    `world of ${o.world.size} ranks does not match a plan for ${o.plan.nodes} nodes`,
  );
  const group =
    o.plan.tpSize === o.plan.nodes ? o.world : ((await o.world.split(me.stage, me.tpRank)) as Communicator);
  const meter = new CommMeter();
  const wire = o.wire ?? 'f32';
  const owners = expertOwners(o.plan, me.stage);
  const comm = new CollectiveShardComm(group, {
    wire,
    reducesPerForward: 2 * (me.shard.layers.end - me.shard.layers.start),
    logits: o.logits ?? 'full',
    meter,
    ...(owners ? { experts: new CollectiveExpertDispatch(group, owners, meter) } : {}),
  });
  const model = await Model.load(o.file, o.kernels, { shard: me.shard, comm });
  return { model, plan: o.plan, me, world: o.world, meter, wire, group, shardComm: comm };
}
