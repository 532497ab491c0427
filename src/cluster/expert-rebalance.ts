import { performance } from 'node:perf_hooks';
import { TandemError } from '../errors/index.js';
import {
  layerReplicas,
  layersMaxNodeShare,
  placementOf,
  profileFromRanks,
  type ExpertPlacement,
  type ExpertProfile,
  type ParallelPlan,
} from '../parallel/index.js';
import { expertsInLayer } from '../engine/model/shard.js';
import type { ClusterSession, LoadOptions } from './session.js';

/**
 * A re-placement of experts goes ahead only when the busiest node's share of routed work
 * (layersMaxNodeShare, by the members' counters) drops by at least this fraction: loading
 * experts costs memory bandwidth on every member while it serves, and counters of a few
 * hundred tokens move by a few percent from one window to the next.
 */
export const REBALANCE_MARGIN = 0.05;

export interface RebalanceOptions {
  /** Minimum drop of the busiest node's share, as a fraction (default REBALANCE_MARGIN). */
  margin?: number;
  /** The routing to follow (default: pulled from the members' counters, their decaying window). */
  profile?: ExpertProfile;
  /** False once the placement changed under the re-placement (a member lost or joined): it is then dropped. */
  stillCurrent?: () => boolean;
  timeoutMs?: number;
}

export interface RebalanceReport {
  /** Whether the members switched to the new placement. */
  switched: boolean;
  /** Why (or why not), in a line for the log and /v1/cluster. */
  reason: string;
  /** The busiest node's share over the mean, averaged over the layers: before and after (equal when not switched). */
  before: number;
  after: number;
  /** Expert copies beyond one per expert, summed over the layers, after. */
  replicas: number;
  /** Milliseconds the members took to load the new experts beside the old (while serving), and to switch. */
  stageMs: number;
  switchMs: number;
  profile: ExpertProfile;
}

/** Each layer's placement in `plan` with its shares under `profile`. */
export function layerPlacements(plan: ParallelPlan, profile: ExpertProfile): ExpertPlacement[] {
  const ranks = plan.ranks.filter((r) => r.stage === 0).sort((a, b) => a.tpRank - b.tpRank);
  return profile.layers.map((loads, l) =>
    placementOf(
      loads,
      ranks.map((r) => [...expertsInLayer(r.shard, l)]),
    ),
  );
}

let nextReplaceId = 1;

/**
 * Re-places an expert-parallel model's experts by their load while it serves, without a
 * pause: the members' counters give each layer's routing; each layer's experts are placed by
 * it (hot ones copied, memory checked as at a load); every member loads its new experts beside
 * the old ones while steps go on; then every member switches at one step boundary (the switch
 * is a request, and each member runs its requests in order, after the step in flight) and
 * frees the experts it let go. Greedy tokens are unchanged: every placement gives one node's
 * bits. The session's placement is the new one afterwards.
 */
export async function rebalanceExperts(
  session: ClusterSession,
  load: LoadOptions,
  o: RebalanceOptions = {},
): Promise<RebalanceReport> {
  const placement = session.placement;
  if (!placement || placement.plan.kind !== 'ep')
    throw new TandemError('CLUSTER_PROTOCOL', 'experts are re-placed only under expert parallel', {
      hint: `load the model with --parallel ep (it is ${placement?.plan.kind ?? 'not loaded'})`,
    });
  const timeoutMs = o.timeoutMs ?? 300_000;
  const profile = o.profile ?? profileFromRanks(placement.plan, await session.expertCounts(), 'recent');
  const now = layerPlacements(placement.plan, profile);
  const byProfile: LoadOptions = { ...load, parallel: 'ep', expertProfile: profile };
  delete byProfile.expertSets;
  const planned = session.plan(byProfile);
  const next = layerPlacements(planned.placement.plan, profile);
  const before = layersMaxNodeShare(now);
  const after = layersMaxNodeShare(next);
  const margin = o.margin ?? REBALANCE_MARGIN;
  const figures = `busiest node's share of routed work ${before.toFixed(2)}x -> ${after.toFixed(2)}x the mean, ${layerReplicas(next)} copies`;
  const report = { before, after: before, replicas: layerReplicas(now), stageMs: 0, switchMs: 0, profile };
  if (!(after <= before * (1 - margin)))
    return {
      ...report,
      switched: false,
      reason: `experts stay: ${figures}, under the ${margin * 100}% margin`,
    };
  const id = nextReplaceId++;
  const t0 = performance.now();
  await Promise.all(
    session.clients.map((c) =>
      c.request('experts-stage', { replaceId: id, plan: planned.placement.plan }, timeoutMs),
    ),
  );
  const stageMs = performance.now() - t0;
  if (o.stillCurrent && !o.stillCurrent())
    return {
      ...report,
      stageMs,
      switched: false,
      reason: 'experts stay: the model was placed again meanwhile',
    };
  const t1 = performance.now();
  // one synchronous pass: each member gets the switch after the same step
  const switched = session.clients.map((c) => c.request('experts-switch', { replaceId: id }, timeoutMs));
  await Promise.all(switched);
  session.placement = planned.placement;
  return {
    ...report,
    after,
    replicas: layerReplicas(next),
    stageMs,
    switchMs: performance.now() - t1,
    switched: true,
    reason: `experts re-placed per layer while serving: ${figures}; loaded beside the old in ${stageMs.toFixed(0)} ms, switched at a step boundary`,
  };
}
