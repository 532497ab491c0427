import type { Gemm } from '../../kernels/backward/gemm.js';
import { referenceOps } from '../../kernels/backward/train-ops.js';
import { AdamW, clipGradNorm, clipGradNormOwned, learningRate, ADAMW_DEFAULTS } from './adamw.js';
import { saveCheckpoint, type Checkpoint, type CurvePoint, type RunSettings } from './checkpoint.js';
import { batchAt, inputIds } from './data.js';
import { LlamaGrad, type GradReady } from './llama-grad.js';
import { initParams, paramLayout, type FlatRange, type ParamEntry, type ParamLayout } from './params.js';

/**
 * The token-embedding rows that a step's gradient can touch on any rank: the input ids of the
 * whole (global) batch. Every other row of [offset, offset + size) is 0 on every rank (the
 * gradient is zeroed per step and only an input's row gathers), so its sum over ranks is 0 too.
 */
export interface EmbeddingRows {
  offset: number;
  size: number;
  /** Values per row (the embedding width). */
  width: number;
  /** Row indices, ascending, distinct. */
  rows: Int32Array;
}

/**
 * How a data-parallel rank joins its gradients with the others' (the parallel layer
 * implements it over collectives; a single node has none). Per step: `begin`, then `ready`
 * for each range as the backward finishes it (the sync may start reducing it at once),
 * then `finish`, after which grad holds the sum over ranks; `sum` adds a scalar over ranks;
 * `agree` checks that every rank holds the same weights after the update. `embedding` names
 * the embedding rows any rank touches, so that the sync may reduce those alone.
 */
export interface GradSync {
  readonly rank: number;
  readonly size: number;
  begin(grad: Float32Array, embedding?: EmbeddingRows): void;
  ready: GradReady;
  finish(): Promise<void>;
  sum(value: number): Promise<number>;
  agree(weights: Float32Array, step: number): Promise<void>;
  /** Present when the ranks split the optimizer (ZeRO-1): see OptimizerShard. */
  readonly shard?: OptimizerShard;
}

/**
 * The optimizer split over the ranks (ZeRO stage 1): after `finish`, this rank holds the
 * summed gradient on its `owned` ranges only (the ranks' owned ranges are disjoint and cover
 * every parameter), clips and updates those alone, then `gatherWeights` gives every rank every
 * rank's updated ranges. AdamW's moments are current on the owned ranges only, so before rank
 * 0 writes a checkpoint every rank calls `gatherMoments` at the same update, with `due` true
 * on rank 0 when it is about to save (rank 0 decides: only it knows where checkpoints go).
 */
export interface OptimizerShard {
  owned(): readonly FlatRange[];
  gatherWeights(weights: Float32Array): Promise<void>;
  /** Every rank's moments of its owned ranges onto every rank when rank 0's `due` is true; returns rank 0's `due`. */
  gatherMoments(m: Float32Array, v: Float32Array, due: boolean): Promise<boolean>;
}

export interface StepLog {
  step: number;
  loss: number;
  lr: number;
  tokens_per_s: number;
}

export interface TrainConfig {
  settings: RunSettings;
  tokens: Int32Array;
  gemm: Gemm;
  /** Where checkpoints go (atomically), every `checkpointEvery` updates and at the end. */
  checkpoint?: string;
  checkpointEvery?: number;
  /** Stop after this many updates of this run (the schedule still spans settings.steps). */
  stopAfter?: number;
  resume?: Checkpoint;
  sync?: GradSync;
  onStep?: (log: StepLog) => void;
}

export interface TrainResult {
  layout: ParamLayout;
  weights: Float32Array;
  step: number;
  curve: CurvePoint[];
  finalLoss: number;
}

/** Runs updates from the resumed step (or 0) until settings.steps or stopAfter. */
export async function train(cfg: TrainConfig): Promise<TrainResult> {
  const s = cfg.settings;
  const layout = paramLayout(s.shape);
  const weights = cfg.resume ? cfg.resume.weights : initParams(layout, s.seed);
  const ops = cfg.gemm.ops ?? referenceOps(cfg.gemm);
  const opt = new AdamW(layout, { ...ADAMW_DEFAULTS, weightDecay: s.weightDecay }, cfg.resume, ops);
  const model = new LlamaGrad(layout, weights, cfg.gemm);
  const grad = new Float32Array(layout.total);
  const curve = cfg.resume ? [...cfg.resume.curve] : [];
  const sync = cfg.sync;
  const size = sync?.size ?? 1;
  const rank = sync?.rank ?? 0;
  const first = Math.floor((s.batch * rank) / size);
  const count = Math.floor((s.batch * (rank + 1)) / size) - first;
  const embed = layout.byName.get('token_embd.weight') as ParamEntry;
  const embedding = { offset: embed.offset, size: embed.size, width: s.shape.embd };
  const schedule = { peak: s.lr, warmup: s.warmup, total: s.steps, minRatio: s.minLrRatio };
  let step = cfg.resume?.step ?? 0;
  const end = Math.min(s.steps, cfg.stopAfter !== undefined ? step + cfg.stopAfter : s.steps);
  const save = async (): Promise<void> => {
    if (cfg.checkpoint === undefined || rank !== 0) return;
    await saveCheckpoint(cfg.checkpoint, { settings: s, step, curve, weights, m: opt.m, v: opt.v });
  };
  // whether rank 0 writes a checkpoint after update `n` (in the loop, or the one after it)
  const saves = (n: number): boolean =>
    cfg.checkpoint !== undefined &&
    rank === 0 &&
    (n === end || (!!cfg.checkpointEvery && n % cfg.checkpointEvery === 0));
  while (step < end) {
    const t0 = performance.now();
    grad.fill(0);
    const batch = batchAt(cfg.tokens, s.seed, step, s.batch, s.seq, first, count);
    if (sync) {
      const everyRow = batchAt(cfg.tokens, s.seed, step, s.batch, s.seq);
      sync.begin(grad, { ...embedding, rows: inputIds(everyRow, s.batch, s.seq) });
    }
    let loss = sync
      ? await model.stepAsync(batch, count, s.seq, grad, s.batch * s.seq, sync.ready)
      : model.step(batch, count, s.seq, grad);
    if (sync) {
      await sync.finish();
      loss = await sync.sum(loss);
    }
    const shard = sync?.shard;
    const lr = learningRate(schedule, step);
    if (sync && shard) {
      const owned = shard.owned();
      if (s.clip > 0) await clipGradNormOwned(grad, s.clip, owned, (x) => sync.sum(x), ops);
      opt.updateOwned(weights, grad, lr, step + 1, owned);
      await shard.gatherWeights(weights);
    } else {
      if (s.clip > 0) clipGradNorm(grad, s.clip, ops);
      opt.update(weights, grad, lr, step + 1);
    }
    step++;
    if (sync) await sync.agree(weights, step);
    if (shard) await shard.gatherMoments(opt.m, opt.v, saves(step));
    curve.push({ step, loss, lr });
    const seconds = (performance.now() - t0) / 1000;
    cfg.onStep?.({ step, loss, lr, tokens_per_s: (s.batch * s.seq) / seconds });
    if (cfg.checkpointEvery && step % cfg.checkpointEvery === 0 && step < end) await save();
  }
  await save();
  return { layout, weights, step, curve, finalLoss: curve.at(-1)?.loss ?? NaN };
}
