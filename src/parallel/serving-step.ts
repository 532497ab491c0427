import type { SequenceCache } from '../engine/kv/kv-cache.js';
import { Model } from '../engine/model/model.js';
import { q8BlockSize } from '../kernels/q8.js';
import type { ParallelPlan } from './plan.js';
import { microBatches } from './micro-batches.js';
import { stageForward, type RankContext } from './runner.js';
import { decodeWire, encodeWire, wireBuffer } from './wire.js';

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
 * pipeline sends them from stage to stage as one message and each stage runs them as one
 * batch (forwardLayersBatch), unless q8 activations would share scale blocks across rows.
 * Returns each row's logits on the last stage, undefined elsewhere.
 */
export async function forwardBatchOnRank(
  ctx: RankContext,
  caches: readonly SequenceCache[],
  tokens: readonly number[],
): Promise<Float32Array[] | undefined> {
  if (ctx.plan.stages === 1) return ctx.model.forwardBatch(tokens, caches);
  if (rowsTravelAlone(ctx)) return stageForwardRows(ctx, caches, tokens);
  const rows: Float32Array[] = [];
  for (const [t, cache] of caches.entries()) {
    const logits = await stageForward(ctx, cache, [tokens[t] as number], [1]);
    if (logits) rows.push(logits);
  }
  return rows.length === caches.length ? rows : undefined;
}

/**
 * Whether this rank runs a prompt piece and decode rows in one pass over its weights (the
 * engine's forwardMixed, or on a pipeline stage forwardLayersMixed, on kernels with
 * matmulPlusRows). A pipeline sends the piece and the rows on as one message, so the wire must
 * encode each row as it would alone (as the batched decode step's). The two ways call the
 * group's collectives and the stages' sends with different lengths, so a coordinator asks for
 * one pass only when every rank of the placement answers true here; the bits are the same
 * either way.
 */
export function runsMixedInOnePass(ctx: RankContext): boolean {
  return (
    ctx.model instanceof Model &&
    ctx.model.kernels.matmulPlusRows !== undefined &&
    (ctx.plan.stages === 1 || rowsTravelAlone(ctx))
  );
}

/**
 * The token lane group of this rank's GEMM (the kernels' gemmGroup), which the coordinator's
 * prompt pieces should fill; undefined where the rank runs no engine Model or its kernels
 * name none.
 */
export function gemmGroupOf(ctx: RankContext): number | undefined {
  return ctx.model instanceof Model ? ctx.model.kernels.gemmGroup : undefined;
}

/** Whether the wire encodes each row of a [n, width] message as it would alone. */
function rowsTravelAlone(ctx: RankContext): boolean {
  return ctx.wire !== 'q8' || ctx.model.config.embeddingLength % q8BlockSize === 0;
}

/**
 * A prompt piece of one sequence and a decode step of others in one serving step. With
 * `onePass` (every rank runsMixedInOnePass) the decode rows ride along the piece's pass over
 * the weights (the model's forwardMixed; on a pipeline each stage's forwardLayersMixed, the
 * piece and the rows sent on as one message); otherwise the piece runs, then the rows (a
 * pipeline sends each through its stages). Returns the piece's last logits, then each row's,
 * on the last stage (undefined elsewhere): bit for bit what forwardOnRank and
 * forwardBatchOnRank give.
 */
export async function forwardMixedOnRank(
  ctx: RankContext,
  prefill: { tokens: readonly number[]; cache: SequenceCache },
  decode: { tokens: readonly number[]; caches: readonly SequenceCache[] },
  onePass: boolean,
): Promise<Float32Array[] | undefined> {
  if (onePass && ctx.model instanceof Model) {
    if (ctx.plan.stages > 1) return stageForwardMixed(ctx, ctx.model, prefill, decode);
    const out = await ctx.model.forwardMixed(prefill, decode);
    return [out.prefill, ...out.decode];
  }
  const first = await forwardOnRank(ctx, prefill.cache, prefill.tokens);
  const rows = await forwardBatchOnRank(ctx, decode.caches, decode.tokens);
  return first && rows ? [first, ...rows] : undefined;
}

/**
 * A pipeline's decode step of n sequences on this rank: the rows' hidden states [n, width]
 * come from the previous stage (or are embedded), run through this stage's layers as one
 * batch and go on to the next stage. Each row's bits are those of stageForward on it alone:
 * the batch is invariant, and the wire encodes a row as it would alone (f32, f16 per value,
 * q8 per 32 values within a row when the width is a multiple of 32).
 */
async function stageForwardRows(
  ctx: RankContext,
  caches: readonly SequenceCache[],
  tokens: readonly number[],
): Promise<Float32Array[] | undefined> {
  const { plan, me, model, world, meter, wire } = ctx;
  const n = caches.length;
  const count = n * model.config.embeddingLength;
  const dtype = wire === 'f16' ? ({ dtype: 'f16' } as const) : {};
  const x = new Float32Array(count);
  if (me.stage === 0) model.embed(tokens, x);
  else {
    const msg = wireBuffer(wire, count);
    await meter.time(0, world.recv((me.stage - 1) * plan.tpSize + me.tpRank, msg, dtype));
    decodeWire(wire, msg, x);
  }
  await model.forwardLayersBatch(x, caches);
  if (me.stage === plan.stages - 1) return model.logitsRows(x, n);
  const msg = wireBuffer(wire, count);
  encodeWire(wire, x, msg);
  await meter.time(msg.byteLength, world.send((me.stage + 1) * plan.tpSize + me.tpRank, msg, dtype));
  return undefined;
}

/**
 * A pipeline's mixed step on this rank: the piece's p rows and the d decode rows [p + d, width]
 * come from the previous stage as one message (or are embedded), run through this stage's
 * layers in one pass (forwardLayersMixed) and go on to the next stage. The last stage returns
 * the piece's last logits, then each decode row's. Row bits are those of stageForward and
 * stageForwardRows: a prompt token's do not depend on where its prompt is cut, a decode row's
 * on its batch, and the wire encodes each row as it would alone (runsMixedInOnePass).
 */
async function stageForwardMixed(
  ctx: RankContext,
  model: Model,
  prefill: { tokens: readonly number[]; cache: SequenceCache },
  decode: { tokens: readonly number[]; caches: readonly SequenceCache[] },
): Promise<Float32Array[] | undefined> {
  const { plan, me, world, meter, wire } = ctx;
  const p = prefill.tokens.length;
  const d = decode.caches.length;
  const width = model.config.embeddingLength;
  const count = (p + d) * width;
  const dtype = wire === 'f16' ? ({ dtype: 'f16' } as const) : {};
  const x = new Float32Array(count);
  if (me.stage === 0) model.embed([...prefill.tokens, ...decode.tokens], x);
  else {
    const msg = wireBuffer(wire, count);
    await meter.time(0, world.recv((me.stage - 1) * plan.tpSize + me.tpRank, msg, dtype));
    decodeWire(wire, msg, x);
  }
  await model.forwardLayersMixed(x, p, prefill.cache, decode.caches);
  if (me.stage === plan.stages - 1) return model.logitsRows(x.subarray((p - 1) * width), d + 1);
  const msg = wireBuffer(wire, count);
  encodeWire(wire, x, msg);
  await meter.time(msg.byteLength, world.send((me.stage + 1) * plan.tpSize + me.tpRank, msg, dtype));
  return undefined;
}
