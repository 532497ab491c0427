import type { SequenceCache } from '../engine/kv/kv-cache.js';
import type { ModelConfig } from '../engine/model/config.js';
import type { ExpertLoad } from '../engine/model/expert-load.js';
import type { ShardSpec } from '../engine/model/shard.js';

/**
 * What a rank's runner, serving steps and node agent need of the shard it holds. Two
 * implementations: the engine's Model (on any CPU kernels) and GpuShardModel (WebGPU). Both
 * cut their work where the other does (prefill pieces, decode batches) and call their
 * ShardComm in the same order with the same lengths, so the ranks of one tensor-parallel
 * group may run on different backends.
 *
 * Shapes: hidden states x [n, width] row-major f32 on the host; logits [vocab] per row.
 */
export interface ShardModel {
  readonly config: ModelConfig;
  /** The part of the model held. */
  readonly shard: ShardSpec;
  /** Tokens routed to each expert of the shard's MoE layers (undefined: dense, or not counted). */
  readonly expertLoad?: ExpertLoad | undefined;
  /** CPU ms spent running this shard's own experts under expert parallel (absent: not measured). */
  readonly expertWork?: { readonly cpuMs: number } | undefined;
  /** A KV cache sized for this shard (its layers, its KV heads). */
  newSession(options?: { contextLength?: number }): SequenceCache;
  /** Hidden states [n, width] of token ids (the first pipeline stage). */
  embed(tokens: ArrayLike<number>, out?: Float32Array): Float32Array;
  /** This shard's layers over x [n, width] in place at positions pos0.. (reserved by the caller). */
  forwardLayers(x: Float32Array, n: number, pos0: number, cache: SequenceCache): Promise<void>;
  /** This shard's layers over one row per cache (each at its cache's next position), in place. */
  forwardLayersBatch(x: Float32Array, caches: readonly SequenceCache[]): Promise<void>;
  /** Logits [vocab] of one hidden state [width] (the last pipeline stage). */
  logits(hidden: Float32Array, out?: Float32Array): Promise<Float32Array>;
  /** The logits of each of n hidden states [n, width]. */
  logitsRows(hidden: Float32Array, n: number): Promise<Float32Array[]>;
  /** Tokens at the cache's next positions through the whole shard; the last one's logits. */
  forward(tokens: ArrayLike<number>, cache: SequenceCache): Promise<Float32Array>;
  /** One decode step of several sequences: tokens[t] at the next position of caches[t]. */
  forwardBatch(tokens: readonly number[], caches: readonly SequenceCache[]): Promise<Float32Array[]>;
  /** Frees what the shard holds outside the JS heap (GPU buffers); absent when nothing is. */
  destroy?(): void;
}
