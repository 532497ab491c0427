import { TandemError } from '../errors/index.js';
import { ggmlTypeInfo } from '../kernels/quant/types.js';
import type { ModelConfig } from '../engine/model/config.js';
import type { TensorEntry } from '../engine/model/model-file.js';
import type { Range, ShardSpec } from '../engine/model/shard.js';

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
}

export function badPlan(message: string, hint: string, details: Record<string, unknown> = {}): TandemError {
  return new TandemError('PAR_BAD_PLAN', message, { hint, details });
}

/** Part `i` of `parts` near-equal parts of `total` units of `unit` elements each. */
export function splitRange(total: number, parts: number, i: number, unit = 1): Range {
  const units = Math.floor(total / unit);
  const start = Math.floor((units * i) / parts) * unit;
  const end = i === parts - 1 ? total : Math.floor((units * (i + 1)) / parts) * unit;
  return { start, end };
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

/** Largest ggml block size among the tensors whose columns a tensor-parallel split cuts (o and down projections). */
function columnBlock(tensors: ReadonlyMap<string, TensorEntry>, pattern: RegExp): number {
  let block = 1;
  for (const [name, t] of tensors) {
    if (pattern.test(name)) block = Math.max(block, ggmlTypeInfo(t.type)?.blockSize ?? 1);
  }
  return block;
}

/**
 * The query-head range of tensor-parallel rank `r` of `size`: split by KV-head groups when
 * the KV heads divide evenly among the ranks (KV heads then split too), else by heads (KV
 * heads replicated), so that no rank does much more attention work than another (3 KV
 * heads on 2 ranks would otherwise be 1 : 2). Ranges are multiples of `unit` heads
 * (quantisation blocks of o).
 */
function headsFor(c: ModelConfig, size: number, r: number, unit: number): Range {
  const group = c.headCount / c.headCountKv;
  if (c.headCountKv % size === 0 && (group * c.headDim) % (unit * c.headDim) === 0) {
    const kv = splitRange(c.headCountKv, size, r);
    return { start: kv.start * group, end: kv.end * group };
  }
  return splitRange(c.headCount, size, r, unit);
}

/** The shard of tensor-parallel rank `r` of `size` (experts: split their FFNs, or hold whole ones for `ep`). */
function tensorShard(
  c: ModelConfig,
  tensors: ReadonlyMap<string, TensorEntry>,
  size: number,
  r: number,
  experts: boolean,
): Omit<ShardSpec, 'layers' | 'embed' | 'head'> {
  const oBlock = columnBlock(tensors, /attn_output\.weight$/);
  const headUnit = Math.max(1, Math.ceil(oBlock / c.headDim));
  const ffBlock = columnBlock(tensors, /ffn_down\.weight$/);
  const expBlock = columnBlock(tensors, /ffn_down_exps\.weight$/);
  const shBlock = columnBlock(tensors, /ffn_down_shexp\.weight$/);
  const all = Array.from({ length: c.expertCount }, (_, i) => i);
  const mine = splitRange(c.expertCount, size, r);
  return {
    heads: headsFor(c, size, r, headUnit),
    ffn: splitRange(c.feedForwardLength, size, r, ffBlock),
    experts: experts ? all.slice(mine.start, mine.end) : all,
    expertFfn: experts
      ? { start: 0, end: c.expertFeedForwardLength }
      : splitRange(c.expertFeedForwardLength, size, r, expBlock),
    sharedFfn: splitRange(c.sharedExpertFeedForwardLength, size, r, shBlock),
    vocab: splitRange(c.vocabSize, size, r),
  };
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
  const group = Array.from({ length: tpSize }, (_, r) => tensorShard(c, tensors, tpSize, r, o.kind === 'ep'));
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
    if (plan.kind === 'ep') parts.push(`experts ${s.experts.join(',')}`);
    if (s.embed) parts.push('embed');
    if (s.head) parts.push(`head ${s.vocab.start}-${s.vocab.end}`);
    return parts.join(', ');
  });
}
