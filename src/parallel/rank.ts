import assert from 'node:assert/strict';
import type { Communicator, ProviderName } from '../collectives/index.js';
import type { Kernels } from '../kernels/types.js';
import type { GpuDevice } from '../kernels/webgpu/index.js';
import { Model } from '../engine/model/model.js';
import type { ModelFile } from '../engine/model/model-file.js';
import type { ShardSpec } from '../engine/model/shard.js';
import type { ParallelPlan } from './plan.js';
import type { RankContext } from './runner.js';
import { CollectiveExpertDispatch, dispatchOwners } from './expert-dispatch.js';
import { GpuShardModel } from './gpu-shard-model.js';
import { CollectiveShardComm, CommMeter } from './shard-comm.js';
import { TpExchange } from './tp-exchange.js';
import type { WireFormat } from './wire.js';

export interface LoadRankOptions {
  file: ModelFile;
  /** The shard runs on these CPU kernels (the engine's Model)... */
  kernels?: Kernels;
  /** ...or on this GPU (GpuShardModel); exactly one of the two. */
  gpu?: GpuDevice;
  /** The longest context a session of this rank asks for (the GPU shard's limit check; default the model's). */
  contextLength?: number;
  plan: ParallelPlan;
  /** This rank's communicator over every rank of the run (rank = plan rank). */
  world: Communicator;
  wire?: WireFormat;
  /** `argmax` when decoding greedily: the vocabulary-parallel head then exchanges 8 bytes per rank. */
  logits?: 'full' | 'argmax';
  /**
   * Tensor-parallel groups of more than one rank exchange their partial sums directly over
   * the fabric (see TpExchange) rather than through the communicator's router.
   */
  exchange?: {
    provider: ProviderName;
    host: string;
    secret: string;
    timeoutMs?: number;
    spin?: boolean | number;
  };
}

export type LoadedRank = RankContext & { group: Communicator; exchange?: TpExchange };

/** The shards of stage `stage`'s tensor-parallel group, in rank order. */
export function stageShards(plan: ParallelPlan, stage: number): ShardSpec[] {
  return plan.ranks
    .filter((r) => r.stage === stage)
    .sort((a, b) => a.tpRank - b.tpRank)
    .map((r) => r.shard);
}

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
  assert.ok((o.kernels === undefined) !== (o.gpu === undefined), 'loadRank takes kernels or a GPU');
  const group =
    o.plan.tpSize === o.plan.nodes ? o.world : ((await o.world.split(me.stage, me.tpRank)) as Communicator);
  const meter = new CommMeter();
  const wire = o.wire ?? 'f32';
  const exchange =
    o.exchange && group.size > 1 ? await TpExchange.connect({ group, wire, ...o.exchange }) : undefined;
  try {
    const owners = dispatchOwners(o.plan, me.stage);
    const comm = new CollectiveShardComm(group, {
      wire,
      logits: o.logits ?? 'full',
      meter,
      ...(exchange ? { exchange } : {}),
      ...(owners ? { experts: new CollectiveExpertDispatch(group, owners, meter, exchange) } : {}),
    });
    const shards = stageShards(o.plan, me.stage);
    const model = o.gpu
      ? await GpuShardModel.load({
          file: o.file,
          device: o.gpu,
          shard: me.shard,
          group: shards,
          tpRank: me.tpRank,
          comm,
          ...(o.contextLength !== undefined ? { contextLength: o.contextLength } : {}),
        })
      : await Model.load(o.file, o.kernels as Kernels, { shard: me.shard, comm, group: shards });
    return {
      model,
      plan: o.plan,
      me,
      world: o.world,
      meter,
      wire,
      group,
      shardComm: comm,
      ...(exchange ? { exchange } : {}),
    };
  } catch (e) {
    await exchange?.close();
    throw e;
  }
}
