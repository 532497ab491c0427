import { TandemError } from '../errors/index.js';
import type { ModelFile } from '../engine/model/model-file.js';
import { Model, type StagedExperts } from '../engine/model/model.js';
import { expertsInLayer, type ShardSpec } from '../engine/model/shard.js';
import type { FfnWeights } from '../engine/model/weights.js';
import type { Weight } from '../kernels/types.js';
import type { ProviderName } from '../collectives/index.js';
import { CollectiveExpertDispatch, dispatchOwners } from './expert-dispatch.js';
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
 * One rank's side of re-placing experts while it serves: the experts a new plan gives it are
 * loaded beside those it holds (`stage`, while forwards go on), then every rank of the group
 * switches at the same step boundary (`switch`, between two forwards: the coordinator's
 * requests run in order on every rank), and the experts let go are freed.
 */
export class RankExperts {
  private staged: { id: number; plan: ParallelPlan; experts: StagedExperts } | undefined;

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
    const model = this.cpuModel();
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
    if (this.staged) this.release(this.staged.experts.loaded.flatMap((m) => [...m.values()]));
    this.staged = undefined;
    const experts = await model.stageExperts(this.file, layers);
    this.staged = { id, plan, experts };
    return { loaded: experts.loaded.reduce((a, m) => a + m.size, 0), peakBytes };
  }

  /**
   * Holds the staged placement `id` from the next forward on (call it between forwards, on
   * every rank of the group at the same boundary): the model's experts, the dispatch's owners
   * and the rank's plan. Returns the experts let go, whose weights the kernels free where they
   * can.
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
    const dropped = this.cpuModel().switchExperts(s.experts);
    dispatch.setOwners(owners);
    this.ctx.plan = s.plan;
    this.ctx.me = s.plan.ranks[this.ctx.me.rank]!;
    this.release(dropped);
    return { dropped: dropped.length };
  }

  /** The rank's Model: experts are re-placed on CPU shards only (a GPU shard keeps the experts it loaded). */
  private cpuModel(): Model {
    const model = this.ctx.model;
    if (!(model instanceof Model))
      throw badReplace(
        `rank ${this.ctx.me.rank} holds its shard on the GPU, whose experts are not re-placed`,
        {
          rank: this.ctx.me.rank,
        },
      );
    return model;
  }

  /** Gives the experts' weights back to the kernels, where they can take them. */
  private release(experts: readonly FfnWeights[]): void {
    const kernels = this.cpuModel().kernels;
    if (kernels.releaseWeight)
      for (const ffn of experts) for (const w of weightsOf(ffn)) kernels.releaseWeight(w);
  }
}

/** Every kernel weight of an FFN. */
function weightsOf(ffn: FfnWeights): Weight[] {
  const p = ffn.gateUp;
  return [...(p.fused ? [p.fused.weight] : []), ...(p.separate ?? []), ...ffn.down.weights];
}
