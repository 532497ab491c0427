import { TandemError } from '../../errors/index.js';
import type { ModelConfig } from './config.js';

/** A half-open range [start, end). */
export interface Range {
  start: number;
  end: number;
}

/**
 * Which part of a model one engine instance holds. The whole model is one shard; the
 * parallel layer builds others:
 * - pipeline: `layers` is a contiguous range; `embed` on the first stage, `head` on the last;
 * - tensor parallel (Megatron): `heads` is a range of query heads (the KV heads they need
 *   are derived, so KV heads are split when the split aligns and replicated when not) and
 *   `ffn` a range of FFN hidden units: q/k/v/gate/up are sliced by output rows, o/down by
 *   input columns, and the partial outputs are summed across the group;
 * - expert parallel: `experts` lists the routed experts held (each whole, or sliced by
 *   `expertFfn`). With a ShardComm that dispatches experts, tokens travel to the ranks
 *   holding their experts and back; without one, the router runs everywhere and the outputs
 *   of the experts held are summed across the group;
 * - vocabulary parallel: `vocab` is a range of output-head rows.
 */
export interface ShardSpec {
  layers: Range;
  embed: boolean;
  head: boolean;
  heads: Range;
  ffn: Range;
  experts: readonly number[];
  /**
   * Expert parallel with a placement per layer: layerExperts[i] lists the routed experts held
   * in model layer i (absent: `experts` in every layer); `experts` is then their union.
   */
  layerExperts?: readonly (readonly number[])[];
  expertFfn: Range;
  /** Shared-expert hidden units (qwen2moe), split like `ffn`. */
  sharedFfn: Range;
  vocab: Range;
}

/** The shard holding the whole model. */
export function fullShard(config: ModelConfig): ShardSpec {
  return {
    layers: { start: 0, end: config.blockCount },
    embed: true,
    head: true,
    heads: { start: 0, end: config.headCount },
    ffn: { start: 0, end: config.feedForwardLength },
    experts: Array.from({ length: config.expertCount }, (_, i) => i),
    expertFfn: { start: 0, end: config.expertFeedForwardLength },
    sharedFfn: { start: 0, end: config.sharedExpertFeedForwardLength },
    vocab: { start: 0, end: config.vocabSize },
  };
}

/** The KV heads that the query heads in `heads` attend with (GQA groups are contiguous). */
export function kvHeadsFor(config: ModelConfig, heads: Range): Range {
  const group = config.headCount / config.headCountKv;
  if (heads.end <= heads.start) return { start: 0, end: 0 };
  return { start: Math.floor(heads.start / group), end: Math.ceil(heads.end / group) };
}

function checkRange(name: string, r: Range, limit: number, allowEmpty: boolean): void {
  const ok = Number.isInteger(r.start) && Number.isInteger(r.end) && r.start >= 0 && r.end <= limit;
  if (!ok || r.end < r.start || (!allowEmpty && r.end === r.start)) {
    throw new TandemError(
      'MODEL_SHARD',
      `shard ${name} range [${r.start}, ${r.end}) does not fit in [0, ${limit})`,
      {
        hint: 'build shards with the parallel planner, which keeps every range inside the model',
        details: { name, start: r.start, end: r.end, limit },
      },
    );
  }
}

/** Checks that a shard fits the model; throws MODEL_SHARD naming the bad range. */
export function validateShard(config: ModelConfig, shard: ShardSpec): void {
  checkRange('layers', shard.layers, config.blockCount, true);
  checkRange('heads', shard.heads, config.headCount, true);
  checkRange('ffn', shard.ffn, config.feedForwardLength, true);
  checkRange('expertFfn', shard.expertFfn, config.expertFeedForwardLength, true);
  checkRange('sharedFfn', shard.sharedFfn, config.sharedExpertFeedForwardLength, true);
  checkRange('vocab', shard.vocab, config.vocabSize, !shard.head);
  checkExperts(config, shard.experts);
  if (shard.layerExperts) {
    if (shard.layerExperts.length !== config.blockCount)
      throw new TandemError(
        'MODEL_SHARD',
        `shard lists experts for ${shard.layerExperts.length} layers; the model has ${config.blockCount}`,
        {
          hint: 'give one expert list per layer of the model',
          details: { layers: shard.layerExperts.length, blockCount: config.blockCount },
        },
      );
    const union = new Set(shard.experts);
    for (const held of shard.layerExperts) {
      checkExperts(config, held);
      if (held.some((e) => !union.has(e)))
        throw new TandemError('MODEL_SHARD', 'a layer holds an expert the shard does not list in `experts`', {
          hint: "`experts` must be the union of every layer's experts",
          details: { experts: [...held] },
        });
    }
  }
}

/**
 * Shard `s` holding the routed experts of `layerExperts` (one list per model layer) in place
 * of its own: its per-layer lists sorted, `experts` their union; validated (MODEL_SHARD).
 */
export function withLayerExperts(
  config: ModelConfig,
  s: ShardSpec,
  layerExperts: readonly (readonly number[])[],
): ShardSpec {
  const next: ShardSpec = {
    ...s,
    experts: [...new Set(layerExperts.flat())].sort((a, b) => a - b),
    layerExperts: layerExperts.map((l) => [...l].sort((a, b) => a - b)),
  };
  validateShard(config, next);
  return next;
}

/** The routed experts the shard holds in model layer `layer`. */
export function expertsInLayer(shard: ShardSpec, layer: number): readonly number[] {
  return shard.layerExperts?.[layer] ?? shard.experts;
}

function checkExperts(config: ModelConfig, experts: readonly number[]): void {
  const seen = new Set<number>();
  for (const e of experts) {
    if (!Number.isInteger(e) || e < 0 || e >= config.expertCount || seen.has(e)) {
      throw new TandemError(
        'MODEL_SHARD',
        `shard expert ${e} is out of range or repeated (model has ${config.expertCount})`,
        {
          hint: 'list each expert id once, each below the expert count',
          details: { expert: e, expertCount: config.expertCount },
        },
      );
    }
    seen.add(e);
  }
}

export function rangeLength(r: Range): number {
  return r.end - r.start;
}
