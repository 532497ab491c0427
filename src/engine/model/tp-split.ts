import { ggmlTypeInfo } from '../../kernels/quant/types.js';
import type { ModelConfig } from './config.js';
import type { TensorEntry } from './model-file.js';
import type { Range, ShardSpec } from './shard.js';

/**
 * Where a tensor-parallel group of `size` cuts a model: the parallel planner builds its shards
 * from these ranges, and the engine's leaves (leaves.ts) put leaf edges on the cuts of the
 * group sizes whose sums are exact, so both must come from here.
 */

/** Part `i` of `parts` near-equal parts of `total` units of `unit` elements each. */
export function splitRange(total: number, parts: number, i: number, unit = 1): Range {
  const units = Math.floor(total / unit);
  const start = Math.floor((units * i) / parts) * unit;
  const end = i === parts - 1 ? total : Math.floor((units * (i + 1)) / parts) * unit;
  return { start, end };
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

/** What tensor-parallel rank `r` of `size` holds (experts: split their FFNs, or hold whole ones when `experts`). */
export function tensorSplit(
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
