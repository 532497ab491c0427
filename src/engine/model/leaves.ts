import type { SumTree } from '../../kernels/reduce-native.js';
import type { Range } from './shard.js';
import { splitRange } from './tp-split.js';

/**
 * Row-parallel projections (attn_output and ffn_down, whose input columns a tensor-parallel
 * split cuts) are computed as `leaves`: runs of input columns, each multiplied on its own, and
 * the partial outputs added in a fixed tree (sumTree). The leaf edges are the cuts of the
 * tensor-parallel groups whose sums are exact (EXACT_GROUP_SIZES), so one node and every rank
 * of such a group multiply the same leaves. The tree splits at the cuts of 2 ranks first, then
 * of 4, then of 3: a rank of a group of 2 or 4 holds one subtree, a rank of 3 one or a few.
 * Each rank adds the subtrees it holds (its `pieces`), and the group adds every rank's pieces
 * in the tree's remaining top levels (GroupSum), so tensor parallel over 2, 3 and 4 nodes
 * gives the single node's activations bit for bit, on every weight type (docs/parallel.md,
 * "Exact tensor parallel").
 */
export const EXACT_GROUP_SIZES: readonly number[] = [2, 4, 3];

/** A projection's leaves: column edges (0 first, the column count last) and the tree over leaf indices. */
export interface LeafPlan {
  edges: readonly number[];
  tree: SumTree;
}

/** How a tensor-parallel group adds its ranks' pieces: pieces per rank, and the tree over all of them in rank order. */
export interface GroupSum {
  counts: readonly number[];
  tree: SumTree;
}

/** What one shard multiplies: the column ranges of its leaves, and the subtrees (over those leaves) it sends. */
export interface ShardLeaves {
  ranges: Range[];
  pieces: SumTree[];
}

/**
 * The leaves of a projection with `cols` input columns: edges at the cuts in `cutSets` that
 * are multiples of `align` columns (quantisation blocks, and for attn_output whole heads),
 * and the tree that splits at the first set's cuts, then within each part at the next set's.
 */
export function leafPlan(cols: number, cutSets: readonly (readonly number[])[], align: number): LeafPlan {
  const usable = cutSets.map((set) =>
    [...new Set(set)].filter((c) => c > 0 && c < cols && c % align === 0).sort((a, b) => a - b),
  );
  const edges = [...new Set([0, cols, ...usable.flat()])].sort((a, b) => a - b);
  const build = (a: number, b: number, level: number): SumTree => {
    for (let l = level; l < usable.length; l++) {
      const inner = usable[l]!.filter((c) => c > a && c < b);
      if (inner.length === 0) continue;
      const bounds = [a, ...inner, b];
      return bounds.slice(1).map((end, i) => build(bounds[i]!, end, l + 1));
    }
    return edges.indexOf(a);
  };
  return { edges, tree: build(0, cols, 0) };
}

/** The leaf indices [first, end) under a node. */
function span(node: SumTree): [number, number] {
  if (typeof node === 'number') return [node, node + 1];
  return [span(node[0]!)[0], span(node[node.length - 1]!)[1]];
}

/** The largest nodes inside leaves [lo, hi), left to right. */
function decompose(node: SumTree, lo: number, hi: number): SumTree[] {
  const [a, b] = span(node);
  if (a >= lo && b <= hi) return [node];
  if (b <= lo || a >= hi || typeof node === 'number') return [];
  return node.flatMap((child) => decompose(child, lo, hi));
}

function shift(node: SumTree, by: number): SumTree {
  return typeof node === 'number' ? node + by : node.map((child) => shift(child, by));
}

/** The leaf indices [first, end) a column range covers, or undefined when it is empty or not on leaf edges. */
function leafSpan(plan: LeafPlan, range: Range): [number, number] | undefined {
  const first = plan.edges.indexOf(range.start);
  const end = plan.edges.indexOf(range.end);
  return range.end > range.start && first >= 0 && end >= 0 ? [first, end] : undefined;
}

/**
 * The leaves a shard holding columns `range` multiplies and the pieces it sends: its leaves and
 * largest subtrees when the range falls on leaf edges, else the range as one leaf (a split
 * the leaves do not follow, e.g. 5 ranks: summed, but not bit for bit as one node sums).
 */
export function shardLeaves(plan: LeafPlan, range: Range): ShardLeaves {
  const at = leafSpan(plan, range);
  if (!at) return { ranges: [range], pieces: [0] };
  const [first, end] = at;
  const ranges = [];
  for (let i = first; i < end; i++) ranges.push({ start: plan.edges[i]!, end: plan.edges[i + 1]! });
  return { ranges, pieces: decompose(plan.tree, first, end).map((p) => shift(p, -first)) };
}

/**
 * How a group whose ranks hold columns `ranges` (in rank order) adds their pieces: the leaf
 * tree with each rank's pieces in place of their subtrees. Undefined when the ranges do not
 * cover the columns in order on leaf edges (then every rank sends one part and the group adds
 * them in the flat pairwise tree, not bit for bit as one node).
 */
export function groupSum(plan: LeafPlan, ranges: readonly Range[]): GroupSum | undefined {
  const cols = plan.edges[plan.edges.length - 1]!;
  const spans = ranges.map((r) => leafSpan(plan, r));
  const covered =
    ranges.every((r, i) => r.start === (i === 0 ? 0 : ranges[i - 1]!.end)) && ranges.at(-1)?.end === cols;
  if (ranges.length < 2 || !covered || spans.some((s) => s === undefined)) return undefined;
  const counts = new Array<number>(ranges.length).fill(0);
  let next = 0;
  const replace = (node: SumTree): SumTree => {
    const [a, b] = span(node);
    const owner = spans.findIndex((s) => s![0] <= a && b <= s![1]);
    if (owner >= 0) {
      counts[owner]!++;
      return next++;
    }
    return (node as readonly SumTree[]).map(replace);
  };
  const tree = replace(plan.tree);
  return { counts, tree };
}

/**
 * The most pieces a rank of a tensor-parallel group of `size` sends when a projection's
 * `units` column units (heads, blocks) are split into near-equal runs, as tensorSplit splits
 * them: 1 where the group's cuts are the tree's first (2 and 4 ranks) or its sum is not exact
 * (sizes outside EXACT_GROUP_SIZES: one part each), more where a rank's columns cross the
 * cuts of a smaller group (3 ranks: each holds parts of two halves' subtrees, 2 pieces).
 * A rank's exchange sends that many parts of the activations to every peer.
 */
export function groupPieces(units: number, size: number): number {
  if (size < 2) return 1;
  const cuts = EXACT_GROUP_SIZES.map((g) =>
    Array.from({ length: g - 1 }, (_, r) => splitRange(units, g, r + 1).start),
  );
  const plan = leafPlan(units, cuts, 1);
  const ranges = Array.from({ length: size }, (_, r) => splitRange(units, size, r));
  return Math.max(1, ...(groupSum(plan, ranges)?.counts ?? [1]));
}
