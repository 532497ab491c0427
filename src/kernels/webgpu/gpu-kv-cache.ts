import type { KvCache, KvCacheOptions } from '../types.js';

/** What `forward` needs of a sequence's state (the engine's SequenceCache has it). */
export interface GpuSequence {
  readonly cache: KvCache;
  readonly length: number;
  /** Checks that n more positions fit the context; throws before anything is computed. */
  reserve(n: number): number;
  advance(n: number): void;
}

/** A sequence's KV cache on the GPU: per layer K and V [maxSeq, kvHeads, headDim] f32. */
export class GpuKvCache implements KvCache {
  constructor(
    readonly options: Readonly<KvCacheOptions>,
    readonly k: readonly GPUBuffer[],
    readonly v: readonly GPUBuffer[],
  ) {}
}
