import type { Range } from './shard.js';

/**
 * Row-parallel projections (attn_output and ffn_down, whose input columns a tensor-parallel
 * split cuts) are computed as `leaves`: equal runs of input columns, each multiplied on its
 * own and the partial outputs added in a fixed pairwise tree (treeSum). The leaf count is a
 * property of the model, not of the run, so one node and every tensor-parallel rank add the
 * same partial sums in the same order: a rank of a group of N (N dividing the leaf count)
 * holds a whole subtree, and the group's all-reduce adds the subtrees' sums in the tree's top
 * levels. Tensor parallel over 2 and 4 nodes then gives the single node's activations bit for
 * bit, on every weight type (docs/parallel.md, "Exact tensor parallel").
 */
export const MAX_LEAVES = 4;

/**
 * The leaves of a projection with `cols` input columns: the largest power of two up to
 * MAX_LEAVES whose leaves are whole multiples of `unit` columns (quantisation blocks, and
 * for attn_output whole heads).
 */
export function leafCount(cols: number, unit: number): number {
  let leaves = MAX_LEAVES;
  while (leaves > 1 && cols % (leaves * unit) !== 0) leaves /= 2;
  return leaves;
}

/**
 * The column ranges a shard holding columns `range` of `cols` (in `leaves` leaves) multiplies
 * separately: its leaves when the range is a whole subtree of the leaf tree (a power-of-two
 * run of leaves starting at a multiple of its length), else the range as one (a split the
 * leaves do not divide, e.g. 3 ranks: summed, but not bit for bit as one node sums).
 */
export function leafRanges(cols: number, leaves: number, range: Range): Range[] {
  const width = cols / leaves;
  const count = (range.end - range.start) / width;
  const first = range.start / width;
  const subtree = Number.isInteger(count) && Number.isInteger(first) && count >= 1 && (count & (count - 1)) === 0 && first % count === 0;
  if (!subtree) return [range];
  return Array.from({ length: count }, (_, j) => ({ start: range.start + j * width, end: range.start + (j + 1) * width }));
}
