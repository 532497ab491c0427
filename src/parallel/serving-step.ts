import type { SequenceCache } from '../engine/kv/kv-cache.js';
import type { ParallelPlan } from './plan.js';
import { microBatches, stageForward, type RankContext } from './runner.js';

/**
 * Serving steps: a coordinator drives every rank through the same forwards, one at a time,
 * so the collectives inside them pair up. A rank holds one KV cache per sequence the
 * coordinator named; which sequences a step carries is the coordinator's choice.
 */

/** The rank whose forwards return the logits a coordinator needs: the first of the last stage. */
export function logitsRank(plan: ParallelPlan): number {
  return (plan.stages - 1) * plan.tpSize;
}

/**
 * Runs tokens at the next positions of one sequence's cache on this rank. Returns the
 * logits of the last token on the ranks of the last stage, undefined elsewhere.
 */
export async function forwardOnRank(
  ctx: RankContext,
  cache: SequenceCache,
  tokens: readonly number[],
): Promise<Float32Array | undefined> {
  if (ctx.plan.stages === 1) return ctx.model.forward(tokens, cache);
  return stageForward(ctx, cache, tokens, microBatches(tokens.length, ctx.plan.stages));
}

/**
 * One decode step of several sequences: tokens[t] at the next position of caches[t]. A
 * single stage runs the rows as one batch (the model's forwardBatch, batch-invariant); a
 * pipeline runs them one after another through its stages. Returns each row's logits on the
 * last stage, undefined elsewhere.
 */
export async function forwardBatchOnRank(
  ctx: RankContext,
  caches: readonly SequenceCache[],
  tokens: readonly number[],
): Promise<Float32Array[] | undefined> {
  if (ctx.plan.stages === 1) return ctx.model.forwardBatch(tokens, caches);
  const rows: Float32Array[] = [];
  for (const [t, cache] of caches.entries()) {
    const logits = await stageForward(ctx, cache, [tokens[t] as number], 1);
    if (logits) rows.push(logits);
  }
  return rows.length === caches.length ? rows : undefined;
}
