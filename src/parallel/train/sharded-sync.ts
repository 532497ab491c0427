import { chunkRanges, type Communicator } from '../../collectives/index.js';
import type { EmbeddingRows, FlatRange, OptimizerShard } from '../../engine/train/index.js';
import { fingerprint } from '../../kernels/backward/fingerprint.js';
import { BUCKET_VALUES, CollectiveGradSync, type Fingerprint } from './grad-sync.js';

/**
 * The GradSync of a data-parallel rank that splits the optimizer over the ranks (ZeRO stage
 * 1). Each range the backward announces is cut into the buckets CollectiveGradSync would
 * all-reduce, and each bucket is reduce-scattered instead: rank r ends with the sum of chunk r
 * of every bucket (chunkRanges' split), started during the backward as before. The trainer
 * clips and runs AdamW on those chunks alone, then gatherWeights all-gathers every bucket's
 * updated weights. The bytes on the wire are the all-reduce's (a reduce-scatter and an
 * all-gather of the same size); what each rank saves is AdamW and the clipping norm on all but
 * 1/size of the parameters.
 *
 * The embedding's range is summed as CollectiveGradSync sums it (its touched rows packed and
 * all-reduced: every rank then holds all of it) and split for the update like any other range.
 *
 * With 2 ranks the gradients equal the all-reduce's bit for bit (IEEE addition commutes), and
 * so does every update that clipping leaves alone (AdamW is per element); when the gradient is
 * clipped, the norm's sum is grouped per rank first, so the scale may differ in its last bit.
 * Every rank gets the same bits either way: the all-gather copies the owner's values.
 */
export class ShardedGradSync extends CollectiveGradSync implements OptimizerShard {
  readonly shard: OptimizerShard = this;
  /** This step's buckets in call order (every rank's list is the same), and this rank's chunk of each. */
  private buckets: FlatRange[] = [];
  private mine: FlatRange[] = [];

  constructor(comm: Communicator, fingerprintOf: Fingerprint = fingerprint) {
    super(comm, fingerprintOf);
  }

  override begin(grad: Float32Array, embedding?: EmbeddingRows): void {
    super.begin(grad, embedding);
    this.buckets = [];
    this.mine = [];
  }

  /** Records the buckets of [start, end) and this rank's chunk of each. */
  private own(start: number, end: number): FlatRange[] {
    const added: FlatRange[] = [];
    for (let a = start; a < end; a += BUCKET_VALUES) {
      const b = Math.min(end, a + BUCKET_VALUES);
      const c = chunkRanges(b - a, this.size)[this.rank]!;
      this.buckets.push([a, b]);
      this.mine.push([a + c.offset, a + c.offset + c.count]);
      added.push([a, b]);
    }
    return added;
  }

  protected override reduceRange(start: number, end: number): Promise<void> {
    const parts = this.own(start, end).map(([a, b]) =>
      this.comm.reduceScatter(this.grad.subarray(a, b), { op: 'sum' }),
    );
    return Promise.all(parts).then(() => undefined);
  }

  protected override reduceRows(e: EmbeddingRows): Promise<void> {
    this.own(e.offset, e.offset + e.size);
    return super.reduceRows(e);
  }

  owned(): readonly FlatRange[] {
    return this.mine;
  }

  async gatherWeights(weights: Float32Array): Promise<void> {
    const t0 = performance.now();
    await this.gatherAll(weights);
    const ms = performance.now() - t0;
    // the gather follows the update: nothing overlaps it
    this.last = { commMs: this.last.commMs + ms, exposedMs: this.last.exposedMs + ms };
  }

  async gatherMoments(m: Float32Array, v: Float32Array, due: boolean): Promise<boolean> {
    const flag = Int32Array.of(due && this.rank === 0 ? 1 : 0);
    await this.comm.allReduce(flag, { op: 'max' });
    if (flag[0] !== 1) return false;
    await Promise.all([this.gatherAll(m), this.gatherAll(v)]);
    return true;
  }

  /** Every bucket of x all-gathered from its owners (the buckets' calls started at once). */
  private gatherAll(x: Float32Array): Promise<void> {
    return Promise.all(this.buckets.map(([a, b]) => this.gatherBucket(x.subarray(a, b)))).then(
      () => undefined,
    );
  }

  /**
   * x's chunks (chunkRanges') from their owners. An all-gather moves equal counts: a bucket
   * that the ranks do not divide evenly travels padded to the largest chunk.
   */
  private async gatherBucket(x: Float32Array): Promise<void> {
    const chunks = chunkRanges(x.length, this.size);
    const own = chunks[this.rank]!;
    if (x.length % this.size === 0) {
      await this.comm.allGather(x.subarray(own.offset, own.offset + own.count), { out: x });
      return;
    }
    const count = chunks[0]!.count;
    const mine = new Float32Array(count);
    mine.set(x.subarray(own.offset, own.offset + own.count));
    const all = (await this.comm.allGather(mine)) as Float32Array;
    for (const [r, c] of chunks.entries()) x.set(all.subarray(r * count, r * count + c.count), c.offset);
  }
}
