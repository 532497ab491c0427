import { TandemError } from '../errors/index.js';
import type { ModelConfig } from '../engine/model/config.js';
import type { TensorEntry } from '../engine/model/model-file.js';
import type { Range, ShardSpec } from '../engine/model/shard.js';
import { tensorSplit } from '../engine/model/tp-split.js';

/** How a model is split across nodes. `hybrid`: tensor parallel inside groups, pipeline across them. */
export type ParallelKind = 'tp' | 'pp' | 'ep' | 'hybrid';
export const parallelKinds: readonly ParallelKind[] = ['tp', 'pp', 'ep', 'hybrid'];

/** What one rank (node) holds and where it sits. Ranks run stage by stage: rank = stage * tpSize + tpRank. */
export interface RankPlan {
  rank: number;
  stage: number;
  tpRank: number;
  shard: ShardSpec;
}

export interface ParallelPlan {
  kind: ParallelKind;
  nodes: number;
  stages: number;
  /** Ranks per stage (the tensor/expert-parallel group size). */
  tpSize: number;
  ranks: RankPlan[];
}

export interface PlanOptions {
  kind: ParallelKind;
  nodes: number;
  /** hybrid: ranks per tensor-parallel group (default 2). */
  tpSize?: number;
  /** pp/hybrid: layers per stage (sums to the block count); default an even split. */
  stageLayers?: readonly number[];
  /**
   * ep: the experts each rank of the group holds (balanceExperts: by load, hot ones on
   * several ranks), or per layer (balanceLayers); default contiguous ranges of ids.
   */
  expertSets?: ExpertSets;
}

/**
 * Expert parallel placements: each rank's experts ([rank] -> ids), the same in every layer,
 * or one such list per model layer (`layers[layer][rank]`).
 */
export type ExpertSets =
  readonly (readonly number[])[] | { readonly layers: readonly (readonly (readonly number[])[])[] };

export function badPlan(message: string, hint: string, details: Record<string, unknown> = {}): TandemError {
  return new TandemError('PAR_BAD_PLAN', message, { hint, details });
}

/** Contiguous ranges from counts: [2, 3] gives [0, 2) and [2, 5). */
export function rangesFromCounts(counts: readonly number[]): Range[] {
  let at = 0;
  return counts.map((c) => ({ start: at, end: (at += c) }));
}

/** Splits `total` into `weights.length` positive counts as close as can be to proportional to the weights. */
export function proportionalCounts(total: number, weights: readonly number[]): number[] {
  const n = weights.length;
  if (total < n)
    throw badPlan(
      `${total} layers cannot be split over ${n} pipeline stages`,
      'use fewer nodes for pipeline parallel, or tensor parallel',
    );
  const sum = weights.reduce((a, b) => a + b, 0);
  const exact = weights.map((w) => (sum > 0 ? (total * w) / sum : total / n));
  const counts = exact.map((e) => Math.max(1, Math.floor(e)));
  // Largest shortfall first when adding, largest excess first when removing (ties: lower stage).
  const pick = (score: (i: number) => number, ok: (i: number) => boolean): number => {
    let best = -1;
    for (let i = 0; i < n; i++) if (ok(i) && (best < 0 || score(i) > score(best))) best = i;
    return best;
  };
  let diff = total - counts.reduce((a, b) => a + b, 0);
  for (; diff > 0; diff--)
    counts[
      pick(
        (i) => exact[i]! - counts[i]!,
        () => true,
      )
    ]!++;
  for (; diff < 0; diff++)
    counts[
      pick(
        (i) => counts[i]! - exact[i]!,
        (i) => counts[i]! > 1,
      )
    ]!--;
  return counts;
}

function checkSplit(
  c: ModelConfig,
  kind: ParallelKind,
  size: number,
  shards: readonly Omit<ShardSpec, 'layers' | 'embed' | 'head'>[],
): void {
  for (const [r, s] of shards.entries()) {
    const empty =
      s.heads.end <= s.heads.start ||
      (c.feedForwardLength > 0 && s.ffn.end <= s.ffn.start) ||
      (c.expertCount > 0 && kind === 'ep' && s.experts.length === 0);
    if (empty) {
      throw badPlan(
        `${kind} over ${size} ranks leaves rank ${r} without heads, FFN units or experts (${c.headCount} heads, ${c.headCountKv} KV heads, FFN ${c.feedForwardLength}, ${c.expertCount} experts)`,
        'use fewer ranks per tensor-parallel group, or pipeline parallel',
        { rank: r, size },
      );
    }
  }
}

/**
 * Replaces each ep rank's experts by the given sets, checked: one set a rank (per layer: one
 * list of sets per model layer), valid ids, every expert held at least once in every layer.
 */
function setExperts(
  c: ModelConfig,
  kind: ParallelKind,
  group: Omit<ShardSpec, 'layers' | 'embed' | 'head'>[],
  sets: ExpertSets,
): void {
  const layers = 'layers' in sets ? sets.layers : [sets];
  const complete = (one: readonly (readonly number[])[]): boolean =>
    one.length === group.length &&
    one.flat().every((e) => Number.isInteger(e) && e >= 0 && e < c.expertCount) &&
    new Set(one.flat()).size === c.expertCount;
  if (kind !== 'ep' || !layers.every(complete) || ('layers' in sets && layers.length !== c.blockCount))
    throw badPlan(
      `expert sets must give each of the ${group.length} expert-parallel ranks its experts${'layers' in sets ? ` in each of the ${c.blockCount} layers (got ${layers.length})` : ''}, every one of the ${c.expertCount} held at least once`,
      'place experts with balanceExperts or balanceLayers, or leave the default split',
      { ranks: group.length, experts: c.expertCount },
    );
  const sorted = (ids: readonly number[]): number[] => [...new Set(ids)].sort((a, b) => a - b);
  group.forEach((g, r) => {
    g.experts = sorted(layers.flatMap((l) => l[r]!));
    if ('layers' in sets) g.layerExperts = layers.map((l) => sorted(l[r]!));
  });
}

/** Builds the plan: what each rank holds. Throws PAR_BAD_PLAN when the model cannot be split that way. */
export function buildPlan(
  c: ModelConfig,
  tensors: ReadonlyMap<string, TensorEntry>,
  o: PlanOptions,
): ParallelPlan {
  const n = o.nodes;
  if (!Number.isInteger(n) || n < 1)
    throw badPlan(`--nodes must be a positive integer, got ${n}`, 'pass --nodes 2 or more');
  if (o.kind === 'ep' && c.expertCount === 0)
    throw badPlan(
      'expert parallel needs a mixture-of-experts model; this one has no experts',
      'use --parallel tp or pp',
    );
  if (o.kind === 'ep' && c.expertCount < n)
    throw badPlan(
      `expert parallel over ${n} nodes needs at least ${n} experts; the model has ${c.expertCount}`,
      'use fewer nodes or --parallel tp',
    );
  const tpSize = o.kind === 'tp' || o.kind === 'ep' ? n : o.kind === 'pp' ? 1 : (o.tpSize ?? 2);
  if (n % tpSize !== 0)
    throw badPlan(
      `hybrid with groups of ${tpSize} needs a multiple of ${tpSize} nodes, got ${n}`,
      'pass --nodes as a multiple of --tp',
    );
  const stages = n / tpSize;
  const counts = o.stageLayers ?? proportionalCounts(c.blockCount, new Array<number>(stages).fill(1));
  if (
    counts.length !== stages ||
    counts.some((x) => !Number.isInteger(x) || x < 1) ||
    counts.reduce((a, b) => a + b, 0) !== c.blockCount
  ) {
    throw badPlan(
      `stage layers [${counts.join(', ')}] must be ${stages} positive counts summing to ${c.blockCount}`,
      'give one layer count per pipeline stage',
    );
  }
  const layerRanges = rangesFromCounts(counts);
  const group = Array.from({ length: tpSize }, (_, r) => tensorSplit(c, tensors, tpSize, r, o.kind === 'ep'));
  if (o.expertSets) setExperts(c, o.kind, group, o.expertSets);
  checkSplit(c, o.kind, tpSize, group);
  const ranks: RankPlan[] = [];
  for (let stage = 0; stage < stages; stage++) {
    for (let tpRank = 0; tpRank < tpSize; tpRank++) {
      const last = stage === stages - 1;
      const split = group[tpRank]!;
      ranks.push({
        rank: stage * tpSize + tpRank,
        stage,
        tpRank,
        shard: {
          ...split,
          layers: layerRanges[stage]!,
          embed: stage === 0,
          head: last,
          vocab: last ? split.vocab : { start: 0, end: 0 },
        },
      });
    }
  }
  return { kind: o.kind, nodes: n, stages, tpSize, ranks };
}

/** One line per rank, for logs and error messages. */
export function describePlan(plan: ParallelPlan): string[] {
  return plan.ranks.map((r) => {
    const s = r.shard;
    const parts = [`rank ${r.rank}: layers ${s.layers.start}-${s.layers.end - 1}`];
    if (plan.tpSize > 1)
      parts.push(`heads ${s.heads.start}-${s.heads.end - 1}`, `ffn ${s.ffn.start}-${s.ffn.end}`);
    if (plan.kind === 'ep' && s.layerExperts)
      parts.push(`experts by layer ${s.layerExperts.map((l) => l.join(',')).join(' | ')}`);
    else if (plan.kind === 'ep') parts.push(`experts ${s.experts.join(',')}`);
    if (s.embed) parts.push('embed');
    if (s.head) parts.push(`head ${s.vocab.start}-${s.vocab.end}`);
    return parts.join(', ');
  });
}
