import { performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Communicator } from '../collectives/communicator.js';
import { TandemError } from '../errors/index.js';
import { generate, greedy, type TokenPicker } from '../engine/generate/generate.js';
import type { SequenceCache } from '../engine/kv/kv-cache.js';
import type { ShardComm } from '../engine/model/comm.js';
import { microBatches } from './micro-batches.js';
import type { CommMeter } from './shard-comm.js';
import type { ParallelPlan, RankPlan } from './plan.js';
import type { ShardModel } from './shard-model.js';
import { decodeWire, encodeWire, wireBuffer, type WireFormat } from './wire.js';

/** Everything one rank needs to take part in a distributed generation. */
export interface RankContext {
  /** This rank's shard: the engine's Model on CPU kernels, or a GpuShardModel. */
  model: ShardModel;
  plan: ParallelPlan;
  me: RankPlan;
  /** Every rank of the run (pipeline handoffs and the token broadcast go here). */
  world: Communicator;
  /** Counts this rank's communication (shared with its ShardComm). */
  meter: CommMeter;
  wire: WireFormat;
  /** Reused across generations (reset at the start of each). */
  cache?: SequenceCache;
  /** The model's ShardComm. */
  shardComm?: ShardComm;
}

export interface RankGenerateOptions {
  maxTokens: number;
  stopTokens?: ReadonlySet<number>;
  pick?: TokenPicker;
  /** Pipeline prefill: micro-batches the prompt is cut into, of equal size (default: microBatches'). */
  microBatches?: number;
  contextLength?: number;
  onToken?: (token: number) => void;
  /**
   * Teacher forcing: step i emits forced[i] whatever the logits say, and the result's
   * `predicted` holds what greedy decoding would have picked (to measure top-1 agreement).
   */
  forced?: readonly number[];
}

/** What one rank measured. Bytes and communication share cover the decode steps (after the first token). */
export interface RankMetrics {
  rank: number;
  stage: number;
  ttftMs: number;
  prefillTokS: number;
  decodeTokS: number;
  /** Bytes this rank sent per decoded token. */
  wireBytesPerToken: number;
  /** Share of each decode step's time this rank spent in (or waiting on) communication. */
  commShare: number;
  /** Milliseconds this rank spent in (or waiting on) communication during this generation's prefill. */
  prefillCommMs: number;
  /**
   * CPU ms this rank spent running its own experts during this generation's prefill, under
   * expert parallel (absent where the shard does not measure it): the ranks' figures side by
   * side are how evenly the experts' work was spread, measured rather than expected.
   */
  prefillExpertCpuMs?: number;
}

export interface RankResult {
  tokens: number[];
  stopReason: 'length' | 'stop';
  metrics: RankMetrics;
  /** With `forced`: each step's greedy pick, on the ranks that pick (empty elsewhere). */
  predicted?: number[];
}

function metricsOf(
  ctx: RankContext,
  t: { ttftMs: number; prefillMs: number; decodeMs: number; decodeSteps: number; promptTokens: number },
  m: { start: { ms: number }; prefill: { bytes: number; ms: number }; end: { bytes: number; ms: number } },
): RankMetrics {
  const decodeBytes = m.end.bytes - m.prefill.bytes;
  const decodeComm = m.end.ms - m.prefill.ms;
  return {
    rank: ctx.me.rank,
    stage: ctx.me.stage,
    ttftMs: t.ttftMs,
    prefillTokS: t.promptTokens / (t.prefillMs / 1000),
    decodeTokS: t.decodeSteps > 0 ? t.decodeSteps / (t.decodeMs / 1000) : 0,
    wireBytesPerToken: t.decodeSteps > 0 ? decodeBytes / t.decodeSteps : 0,
    commShare: t.decodeMs > 0 ? Math.min(1, decodeComm / t.decodeMs) : 0,
    prefillCommMs: m.prefill.ms - m.start.ms,
  };
}

/** One stage: every rank of it holds all the layers, so the engine's own loop runs on each, in lockstep. */
async function generateSingleStage(
  ctx: RankContext,
  cache: SequenceCache,
  prompt: readonly number[],
  o: RankGenerateOptions,
): Promise<RankResult> {
  const start = ctx.meter.snapshot();
  let prefill = start;
  let firstAt = 0;
  const work = ctx.model.expertWork;
  const work0 = work?.cpuMs ?? 0;
  let prefillWork = 0;
  const started = performance.now();
  const result = await generate(ctx.model, cache, prompt, {
    maxTokens: o.maxTokens,
    ...(o.pick ? { pick: o.pick } : {}),
    ...(o.stopTokens ? { stopTokens: o.stopTokens } : {}),
    onToken: (token) => {
      if (firstAt === 0) {
        firstAt = performance.now();
        prefill = ctx.meter.snapshot();
        prefillWork = (work?.cpuMs ?? 0) - work0;
      }
      o.onToken?.(token);
    },
  });
  const end = ctx.meter.snapshot();
  const decodeMs = performance.now() - firstAt;
  const times = {
    ttftMs: result.ttftMs,
    prefillMs: firstAt - started,
    decodeMs,
    decodeSteps: result.tokens.length - 1,
    promptTokens: prompt.length,
  };
  const metrics = metricsOf(ctx, times, { start, prefill, end });
  return {
    tokens: result.tokens,
    stopReason: result.stopReason === 'stop' ? 'stop' : 'length',
    metrics: work ? { ...metrics, prefillExpertCpuMs: prefillWork } : metrics,
  };
}

/**
 * Runs tokens through this rank's stage: receives hidden states from the previous stage
 * (or embeds), runs its layers, sends them on. The prompt goes in micro-batches so stage s
 * works on batch i while stage s + 1 works on batch i - 1. Returns logits on the last stage.
 */
export async function stageForward(
  ctx: RankContext,
  cache: SequenceCache,
  tokens: readonly number[],
  pieces: readonly number[],
): Promise<Float32Array | undefined> {
  const { plan, me, model, world, meter, wire } = ctx;
  const width = model.config.embeddingLength;
  const last = me.stage === plan.stages - 1;
  const prev = (me.stage - 1) * plan.tpSize + me.tpRank;
  const next = (me.stage + 1) * plan.tpSize + me.tpRank;
  const dtype = wire === 'f16' ? ({ dtype: 'f16' } as const) : {};
  const sends: Promise<void>[] = [];
  let lastHidden: Float32Array | undefined;
  let b = 0;
  for (const n of pieces) {
    // A turn of the event loop before the next piece's layers, so that each piece leaves
    // before the next is computed: the communicator sends in order, and a send written from
    // the caller's memory settles on its completion, which only a turn polls.
    if (sends.length > 0) await nextTurn();
    const a = b;
    b = a + n;
    const x = new Float32Array(n * width);
    if (me.stage === 0) model.embed(tokens.slice(a, b), x);
    else {
      const msg = wireBuffer(wire, n * width);
      await meter.time(0, world.recv(prev, msg, dtype));
      decodeWire(wire, msg, x);
    }
    const pos = cache.reserve(n);
    await model.forwardLayers(x, n, pos, cache);
    cache.advance(n);
    if (!last) {
      const msg = wireBuffer(wire, n * width);
      encodeWire(wire, x, msg);
      sends.push(meter.time(msg.byteLength, world.send(next, msg, dtype)));
    } else lastHidden = x.subarray((n - 1) * width);
  }
  await Promise.all(sends);
  return lastHidden ? model.logits(lastHidden) : undefined;
}

/** Several stages: the last picks each token and broadcasts it to every rank. */
async function generatePipeline(
  ctx: RankContext,
  cache: SequenceCache,
  prompt: readonly number[],
  o: RankGenerateOptions,
): Promise<RankResult> {
  const { plan, world, meter } = ctx;
  const pick = o.pick ?? greedy;
  const root = (plan.stages - 1) * plan.tpSize;
  const history = [...prompt];
  const tokens: number[] = [];
  const shared = new Int32Array(1);
  const share = async (logits: Float32Array | undefined): Promise<number> => {
    if (world.rank === root && logits) shared[0] = pick(logits, history);
    await meter.time(world.rank === root ? 4 * (world.size - 1) : 0, world.broadcast(shared, root));
    return shared[0] as number;
  };
  const started = performance.now();
  const start = meter.snapshot();
  let token = await share(
    await stageForward(ctx, cache, prompt, microBatches(prompt.length, plan.stages, o.microBatches)),
  );
  const firstAt = performance.now();
  const prefill = meter.snapshot();
  let stopReason: RankResult['stopReason'] = 'length';
  for (;;) {
    tokens.push(token);
    history.push(token);
    o.onToken?.(token);
    if (o.stopTokens?.has(token)) {
      stopReason = 'stop';
      break;
    }
    if (tokens.length >= o.maxTokens) break;
    token = await share(await stageForward(ctx, cache, [token], [1]));
  }
  const end = meter.snapshot();
  const times = {
    ttftMs: firstAt - started,
    prefillMs: firstAt - started,
    decodeMs: performance.now() - firstAt,
    decodeSteps: tokens.length - 1,
    promptTokens: prompt.length,
  };
  return { tokens, stopReason, metrics: metricsOf(ctx, times, { start, prefill, end }) };
}

function checkRequest(prompt: readonly number[], o: RankGenerateOptions, contextLength: number): void {
  if (prompt.length === 0 || !Number.isInteger(o.maxTokens) || o.maxTokens < 1) {
    throw new TandemError(
      'GENERATE_PROMPT',
      `a generation needs at least one prompt token and --max-tokens >= 1 (got ${prompt.length} tokens, ${o.maxTokens})`,
      {
        hint: 'pass a prompt and a positive --max-tokens',
      },
    );
  }
  const need = prompt.length + o.maxTokens - 1;
  if (need > contextLength) {
    throw new TandemError(
      'KV_CONTEXT_FULL',
      `${prompt.length} prompt tokens plus ${o.maxTokens} new ones need ${need} positions; the context holds ${contextLength}`,
      {
        hint: 'shorten the prompt or lower --max-tokens',
        details: { promptTokens: prompt.length, maxTokens: o.maxTokens, contextLength },
      },
    );
  }
}

/**
 * This rank's part of one greedy (or seeded) generation. Every rank of the run calls it with
 * the same prompt and options; all return the same tokens (the engine's reductions and the
 * token broadcast are bit-identical on every rank) and their own metrics.
 */
export async function generateOnRank(
  ctx: RankContext,
  prompt: readonly number[],
  o: RankGenerateOptions,
): Promise<RankResult> {
  const contextLength = Math.min(
    o.contextLength ?? ctx.model.config.contextLength,
    ctx.model.config.contextLength,
  );
  checkRequest(prompt, o, contextLength);
  if (ctx.cache === undefined || ctx.cache.contextLength !== contextLength)
    ctx.cache = ctx.model.newSession({ contextLength });
  const cache = ctx.cache;
  cache.reset();
  const forced = o.forced;
  if (forced === undefined)
    return ctx.plan.stages === 1
      ? generateSingleStage(ctx, cache, prompt, o)
      : generatePipeline(ctx, cache, prompt, o);
  if (forced.length < o.maxTokens)
    throw new TandemError('GENERATE_PROMPT', `${forced.length} forced tokens for ${o.maxTokens} steps`, {
      hint: 'give one forced token per step',
    });
  const predicted: number[] = [];
  const pick = (logits: Float32Array): number => forced[predicted.push(greedy(logits)) - 1] as number;
  const run = { ...o, pick };
  const result =
    ctx.plan.stages === 1
      ? await generateSingleStage(ctx, cache, prompt, run)
      : await generatePipeline(ctx, cache, prompt, run);
  return { ...result, predicted };
}
