import type { Communicator } from '../../collectives/index.js';
import { TandemError } from '../../errors/index.js';
import type { EmbeddingRows, GradSync } from '../../engine/train/index.js';
import { FINGERPRINT_LANES, fingerprint } from '../../kernels/backward/fingerprint.js';

/** Writes a Float32Array's fingerprint (16 words): fingerprint.ts's, or the native ops' twin of it. */
export type Fingerprint = (x: Float32Array, out: Uint32Array) => void;

/** Largest bucket, in f32 values (4 MiB): a layer's range is cut into pieces of at most this. */
export const BUCKET_VALUES = 1 << 20;

/** Where a step's communication time went, for `tandem bench train`. */
export interface SyncTimes {
  /** From the first bucket's start to the last one's end, ms. */
  commMs: number;
  /** Of it, the time the rank waited in finish() with nothing left to compute, ms. */
  exposedMs: number;
}

/**
 * The GradSync of a data-parallel rank over tandem's collectives: each range the backward
 * announces is all-reduced (sum) in buckets as soon as it is final, while the backward goes
 * on with the layers below (the communicator runs its calls in order, the same order on
 * every rank since every rank runs the same backward). Gradients are already scaled by the
 * global token count, so the sum is the global mean's gradient. Every all-reduce is
 * deterministic and gives every rank the same bits, so ranks that start equal stay equal;
 * `agree` checks that with a 512-bit fingerprint of the weights after every update (one pass
 * over them: `fingerprint`, the native ops' where the rank has them; every implementation
 * gives the same bits, so ranks with different kernels compare).
 */
export class CollectiveGradSync implements GradSync {
  protected grad: Float32Array = new Float32Array(0);
  private embedding: EmbeddingRows | undefined;
  private packedRows = new Float32Array(0);
  private pending: Promise<void>[] = [];
  private firstStart = 0;
  private lastEnd = 0;
  last: SyncTimes = { commMs: 0, exposedMs: 0 };

  constructor(
    protected readonly comm: Communicator,
    private readonly fingerprintOf: Fingerprint = fingerprint,
  ) {}

  get rank(): number {
    return this.comm.rank;
  }

  get size(): number {
    return this.comm.size;
  }

  begin(grad: Float32Array, embedding?: EmbeddingRows): void {
    this.grad = grad;
    this.embedding = embedding;
    this.pending = [];
    this.firstStart = 0;
  }

  readonly ready = (start: number, end: number): void => {
    if (this.firstStart === 0) this.firstStart = performance.now();
    const e = this.embedding;
    const reduced = (
      e && start === e.offset && end === e.offset + e.size ? this.reduceRows(e) : this.reduceRange(start, end)
    ).then(() => {
      this.lastEnd = performance.now();
    });
    // finish() awaits it; a bucket that fails while the backward pass still runs (a lost
    // rank) must not be an unhandled rejection before then
    reduced.catch(() => {});
    this.pending.push(reduced);
  };

  /** Sums grad[start, end) over the ranks: all-reduced in buckets of at most BUCKET_VALUES. */
  protected reduceRange(start: number, end: number): Promise<void> {
    return this.allReduceBuckets(this.grad.subarray(start, end));
  }

  /** All-reduces `values` (sum) in buckets of at most BUCKET_VALUES, each started at once. */
  private allReduceBuckets(values: Float32Array): Promise<void> {
    const buckets: Promise<void>[] = [];
    for (let a = 0; a < values.length; a += BUCKET_VALUES)
      buckets.push(
        this.comm.allReduce(values.subarray(a, Math.min(values.length, a + BUCKET_VALUES)), { op: 'sum' }),
      );
    return Promise.all(buckets).then(() => undefined);
  }

  /**
   * The embedding's gradient, reduced on the rows some rank touched only: they are packed,
   * summed and put back; every other row is 0 on every rank, and stays so. A step's batch
   * reads a fraction of the vocabulary, so this cuts the bytes of the last range of the
   * backward, the one nothing is left to overlap with.
   */
  protected reduceRows(e: EmbeddingRows): Promise<void> {
    const w = e.width;
    // reused from step to step (each step's rows differ in number; the buffer only grows)
    if (this.packedRows.length < e.rows.length * w) this.packedRows = new Float32Array(e.rows.length * w);
    const packed = this.packedRows.subarray(0, e.rows.length * w);
    for (let i = 0; i < e.rows.length; i++) {
      const at = e.offset + (e.rows[i] as number) * w;
      packed.set(this.grad.subarray(at, at + w), i * w);
    }
    const grad = this.grad;
    return this.allReduceBuckets(packed).then(() => {
      for (let i = 0; i < e.rows.length; i++)
        grad.set(packed.subarray(i * w, i * w + w), e.offset + (e.rows[i] as number) * w);
    });
  }

  async finish(): Promise<void> {
    const t0 = performance.now();
    await Promise.all(this.pending);
    const t1 = performance.now();
    this.last = { commMs: Math.max(0, this.lastEnd - this.firstStart), exposedMs: t1 - t0 };
  }

  /**
   * The sum over ranks of a double, exactly as one process adds them in rank order: each rank
   * puts its value's two 32-bit words in its own slots of an i32 vector, zeros elsewhere, so
   * the integer sum is a gather of every rank's bits.
   */
  async sum(value: number): Promise<number> {
    const f = new Float64Array(1);
    const w = new Int32Array(f.buffer);
    const words = new Int32Array(2 * this.size);
    f[0] = value;
    words[2 * this.rank] = w[0] as number;
    words[2 * this.rank + 1] = w[1] as number;
    await this.comm.allReduce(words, { op: 'sum' });
    let total = 0;
    for (let r = 0; r < this.size; r++) {
      w[0] = words[2 * r] as number;
      w[1] = words[2 * r + 1] as number;
      total += f[0];
    }
    return total;
  }

  async agree(weights: Float32Array, step: number): Promise<void> {
    const L = FINGERPRINT_LANES;
    const fp = new Uint32Array(L);
    this.fingerprintOf(weights, fp);
    // max over ranks of the fingerprint words and of their complements (~h, order-reversing): max(~h) = ~min(h)
    const words = new Int32Array(2 * L);
    for (let i = 0; i < L; i++) {
      words[i] = fp[i] as number;
      words[L + i] = ~(words[i] as number);
    }
    const mine = words.slice(0, L);
    await this.comm.allReduce(words, { op: 'max' });
    for (let i = 0; i < L; i++) {
      if (words[i] !== ~(words[L + i] as number) || words[i] !== mine[i])
        throw new TandemError(
          'PAR_TRAIN_DIVERGED',
          `rank ${this.rank}: the weights differ between ranks after update ${step} (fingerprint prefix ${Buffer.from(fp.buffer).toString('hex').slice(0, 16)})`,
          {
            hint: 'a bug: every rank applies the same all-reduced gradient; rerun and report it with the command',
          },
        );
    }
  }
}
