import assert from 'node:assert/strict';
import { TandemError } from '../../errors/index.js';
import type { Kernels, KvCache, KvCacheType } from '../../kernels/types.js';

export interface SequenceCacheOptions {
  /** Layers this shard holds. */
  layers: number;
  /** KV heads stored per layer on this shard. */
  kvHeads: number;
  headDim: number;
  /** Positions the cache holds (at most the model's context length). */
  contextLength: number;
  type: KvCacheType;
}

/**
 * The KV cache of one sequence: kernel-owned K and V storage per layer plus how many
 * positions are filled. Positions are appended in order; `reserve` refuses to go past the
 * context length with KV_CONTEXT_FULL before anything is written.
 */
export class SequenceCache {
  readonly cache: KvCache;
  readonly contextLength: number;
  private filled = 0;

  constructor(kernels: Pick<Kernels, 'createKvCache'>, options: SequenceCacheOptions) {
    this.contextLength = options.contextLength;
    this.cache = kernels.createKvCache({
      layers: options.layers,
      kvHeads: options.kvHeads,
      headDim: options.headDim,
      maxSeq: options.contextLength,
      type: options.type,
    });
  }

  /** Positions already filled; the next token goes at this position. */
  get length(): number {
    return this.filled;
  }

  /** Checks that `n` more positions fit; returns the first of them. */
  reserve(n: number): number {
    if (this.filled + n > this.contextLength) {
      throw new TandemError(
        'KV_CONTEXT_FULL',
        `the context holds ${this.contextLength} positions; ${this.filled} are used and ${n} more were asked for`,
        {
          hint: "shorten the prompt or --max-tokens, or raise --context up to the model's context length",
          details: { contextLength: this.contextLength, used: this.filled, requested: n },
        },
      );
    }
    return this.filled;
  }

  /** Marks `n` more positions as filled (after every layer has stored them). */
  advance(n: number): void {
    this.filled += n;
  }

  /** Forgets positions from `length` on (the next token overwrites them). */
  truncate(length: number): void {
    assert.ok(
      length >= 0 && length <= this.filled,
      `cannot truncate a cache of ${this.filled} positions to ${length}`,
    );
    this.filled = length;
  }

  reset(): void {
    this.filled = 0;
  }
}
