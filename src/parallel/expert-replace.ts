import { TandemError } from '../errors/index.js';
import type { ModelFile } from '../engine/model/model-file.js';
import { Model } from '../engine/model/model.js';
import { expertsInLayer, type ShardSpec } from '../engine/model/shard.js';
import type { FfnWeights } from '../engine/model/weights.js';
import type { Weight } from '../kernels/types.js';
import type { ProviderName } from '../collectives/index.js';
import { CollectiveExpertDispatch, dispatchOwners } from './expert-dispatch.js';
import { GpuShardModel } from './gpu-shard-model.js';
import type { RankExpertCounts } from './expert-profile.js';
import { commBytes, shardBytes } from './memory.js';
import type { ParallelPlan } from './plan.js';
import type { LoadedRank } from './rank.js';

/** What a rank's memory check of a staged placement needs: its limit and how the load counted. */
export interface ReplaceBudget {
  memLimit?: number;
  contextLength?: number;
  sequences?: number;
  provider: ProviderName;
}

function badReplace(message: string, details: Record<string, unknown> = {}): TandemError {
  return new TandemError('PAR_BAD_PLAN', `expert re-placement: ${message}`, {
    hint: 'stage a plan that moves only experts of the loaded expert-parallel plan, on the same nodes',
    details,
  });
}

/** The shard with its experts (and per-layer experts) taken out: what must stay the same. */
function withoutExperts(s: ShardSpec): string {
  const rest: Partial<ShardSpec> = { ...s };
  delete rest.experts;
  delete rest.layerExperts;
  return JSON.stringify(rest);
}

/**
 * A placement staged on a rank's shard, whichever backend holds it: `switchTo` holds it from
 * the next forward on and frees the experts let go (returning how many), `drop` frees it
 * unswitched.
 */
interface StagedOnShard {
  readonly loaded: number;
  switchTo(): number;
  drop(): void;
}

/**
 * Stages `layerExperts` (one list per model layer) on the rank's shard: the engine's Model
 * (its experts' weights given back to its kernels when let go) or a GpuShardModel (its
 * experts' buffers destroyed when let go).
 */
async function stageOnShard(
  ctx: LoadedRank,
  file: ModelFile,
  layerExperts: readonly (readonly number[])[],
): Promise<StagedOnShard> {
  const model = ctx.model;
  if (model instanceof GpuShardModel) {
    const staged = await model.stageExperts(file, layerExperts);
    return {
      loaded: staged.loaded,
      switchTo: () => model.switchExperts(staged),
      drop: () => model.dropStaged(staged),
    };
  }
  if (!(model instanceof Model))
    throw badReplace(`rank ${ctx.me.rank}'s shard does not re-place its experts`, { rank: ctx.me.rank });
  const staged = await model.stageExperts(file, layerExperts);
  const release = (experts: readonly FfnWeights[]): number => {
    if (model.kernels.releaseWeight)
      for (const ffn of experts) for (const w of weightsOf(ffn)) model.kernels.releaseWeight(w);
    return experts.length;
  };
  return {
    loaded: staged.loaded.reduce((a, m) => a + m.size, 0),
    switchTo: () => release(model.switchExperts(staged)),
    drop: () => void release(staged.loaded.flatMap((m) => [...m.values()])),
  };
}

/**
 * One rank's side of re-placing experts while it serves, on a CPU or a GPU shard: the experts
 * a new plan gives it are loaded beside those it holds (`stage`, while forwards go on), then
 * every rank of the group switches at the same step boundary (`switch`, between two forwards:
 * the coordinator's requests run in order on every rank), and the experts let go are freed.
 */
export class RankExperts {
  private staged: { id: number; plan: ParallelPlan; experts: StagedOnShard } | undefined;

  constructor(
    private readonly ctx: LoadedRank,
    private readonly file: ModelFile,
  ) {}

  /** This rank's counters, or undefined for a dense model. */
  counts(): RankExpertCounts | undefined {
    const load = this.ctx.model.expertLoad;
    if (!load) return undefined;
    return {
      layerStart: this.ctx.model.shard.layers.start,
      layers: load.layers,
      experts: load.experts,
      recent: Array.from(load.recent),
      totals: Array.from(load.totals),
    };
  }

  /**
   * Loads the experts `plan` gives this rank beside those it holds, after checking that the
   * plan moves only experts and that the old and new experts fit the memory limit together
   * (both are held until the switch). Replaces an earlier staged placement. Returns the
   * experts loaded and the bytes held while both are.
   */
  async stage(
    id: number,
    plan: ParallelPlan,
    budget: ReplaceBudget,
  ): Promise<{ loaded: number; peakBytes: number }> {
    const model = this.ctx.model;
    const now = this.ctx.plan;
    const rank = this.ctx.me.rank;
    const next = plan.ranks[rank];
    const same =
      plan.kind === 'ep' &&
      now.kind === 'ep' &&
      plan.nodes === now.nodes &&
      plan.tpSize === now.tpSize &&
      plan.stages === now.stages &&
      now.ranks.every(
        (r, i) => plan.ranks[i] && withoutExperts(plan.ranks[i]!.shard) === withoutExperts(r.shard),
      );
    if (!same || !next)
      throw badReplace(`plan ${id} changes more than the experts of rank ${rank}`, { id, rank });
    const c = model.config;
    const layers = Array.from({ length: c.blockCount }, (_, l) => expertsInLayer(next.shard, l));
    const held = model.shard;
    const union = Array.from({ length: c.blockCount }, (_, l) => [
      ...new Set([...expertsInLayer(held, l), ...layers[l]!]),
    ]);
    const peak: ShardSpec = { ...held, experts: [...new Set(union.flat())], layerExperts: union };
    const peakBytes =
      shardBytes(c, this.file.tensors, peak, {
        ...(budget.contextLength ? { contextLength: budget.contextLength } : {}),
        ...(budget.sequences ? { sequences: budget.sequences } : {}),
      }) + commBytes(plan, budget.provider);
    if (budget.memLimit !== undefined && peakBytes > budget.memLimit)
      throw new TandemError(
        'PAR_NO_FIT',
        `rank ${rank} cannot hold its new experts beside the old ones: ${peakBytes} bytes over its limit of ${budget.memLimit}`,
        {
          hint: 'raise --mem-limit, or re-place with fewer copies of hot experts',
          details: { rank, bytes: peakBytes, memLimit: budget.memLimit },
        },
      );
    // an earlier placement staged and not switched to: its experts are let go
    this.staged?.experts.drop();
    this.staged = undefined;
    const experts = await stageOnShard(this.ctx, this.file, layers);
    this.staged = { id, plan, experts };
    return { loaded: experts.loaded, peakBytes };
  }

  /**
   * Holds the staged placement `id` from the next forward on (call it between forwards, on
   * every rank of the group at the same boundary): the shard's experts, the dispatch's owners
   * and the rank's plan. Returns how many experts were let go (and freed).
   */
  switch(id: number): { dropped: number } {
    const s = this.staged;
    if (!s || s.id !== id)
      throw badReplace(`no staged placement ${id} on rank ${this.ctx.me.rank} (staged: ${s?.id ?? 'none'})`, {
        id,
      });
    const dispatch = this.ctx.shardComm?.experts;
    const owners = dispatchOwners(s.plan, this.ctx.me.stage);
    if (!(dispatch instanceof CollectiveExpertDispatch) || !owners)
      throw badReplace('the loaded model does not dispatch experts', { id });
    this.staged = undefined;
    const dropped = s.experts.switchTo();
    dispatch.setOwners(owners);
    this.ctx.plan = s.plan;
    this.ctx.me = s.plan.ranks[this.ctx.me.rank]!;
    return { dropped };
  }
}

/** Every kernel weight of an FFN. */
function weightsOf(ffn: FfnWeights): Weight[] {
  const p = ffn.gateUp;
  return [...(p.fused ? [p.fused.weight] : []), ...(p.separate ?? []), ...ffn.down.weights];
}
