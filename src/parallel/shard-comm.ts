import { performance } from 'node:perf_hooks';
import type { Communicator } from '../collectives/communicator.js';
import { flatTree, sumTree, treeSpares } from '../kernels/reduce-native.js';
import type { GroupSum } from '../engine/model/leaves.js';
import type { ExpertDispatch, LogitsNeed, ShardComm } from '../engine/model/comm.js';
import type { TpExchange } from './tp-exchange.js';
import { wireBuffer, wireLength, encodeWire, decodeWire, type WireFormat } from './wire.js';

/** Communication counters of one rank: bytes it sent and milliseconds it spent waiting on the group. */
export class CommMeter {
  bytes = 0;
  ms = 0;
  calls = 0;

  async time<T>(bytes: number, work: Promise<T>): Promise<T> {
    const t0 = performance.now();
    try {
      return await work;
    } finally {
      this.ms += performance.now() - t0;
      this.bytes += bytes;
      this.calls++;
    }
  }

  snapshot(): { bytes: number; ms: number; calls: number } {
    return { bytes: this.bytes, ms: this.ms, calls: this.calls };
  }
}

/**
 * Bytes this rank puts on the wire for an all-reduce of `bytes` over `size` ranks with
 * `algorithm`: mesh sends the whole vector to every peer; ring and halving-doubling send
 * 2 (p - 1) / p of it; a tree about twice.
 */
export function allReduceWireBytes(bytes: number, size: number, algorithm: string | undefined): number {
  if (size <= 1) return 0;
  if (algorithm === 'mesh') return (size - 1) * bytes;
  if (algorithm === 'tree') return 2 * bytes;
  return Math.ceil((2 * (size - 1) * bytes) / size);
}

export interface ShardCommOptions {
  wire?: WireFormat;
  /**
   * `argmax`: the vocabulary-parallel head exchanges only each rank's best (value, id) and
   * leaves -Infinity elsewhere: exact for greedy decoding at a few bytes per token. `full`
   * gathers every logit (any sampler).
   */
  logits?: 'full' | 'argmax';
  meter?: CommMeter;
  /** The group's direct exchange: all-reduces and the argmax head go through it when given. */
  exchange?: TpExchange;
  /** Expert parallel: the MoE layers send tokens to their experts through it. */
  experts?: ExpertDispatch;
}

/**
 * The engine's ShardComm over a collectives communicator (the tensor-parallel group). Sums
 * run in one fixed order (sumTree's), so every rank gets bit-identical
 * activations and logits, and therefore picks the same token.
 */
export class CollectiveShardComm implements ShardComm {
  readonly meter: CommMeter;
  readonly experts: ExpertDispatch | undefined;
  private readonly wire: WireFormat;
  private readonly logitsMode: 'full' | 'argmax';
  /** The needs planLogits gave, next first: each allGatherLogits call takes one. */
  private planned: LogitsNeed[] = [];
  private mine: Float32Array | Uint16Array | Int32Array | undefined;
  private gathered: Float32Array | Uint16Array | Int32Array | undefined;
  private own: Float32Array | undefined;
  private decoded: Float32Array[] = [];
  private spare: Float32Array[] = [];
  private readonly exchange: TpExchange | undefined;
  private readonly carries = new Map<number, Float32Array>();
  private readonly best = new Float32Array(2);
  private bestAll = new Float32Array(0);

  constructor(
    readonly comm: Communicator,
    o: ShardCommOptions = {},
  ) {
    this.wire = o.wire ?? 'f32';
    this.logitsMode = o.logits ?? 'full';
    this.meter = o.meter ?? new CommMeter();
    this.exchange = o.exchange;
    this.experts = o.experts;
  }

  /** A pass over the shard's layers starts: every carried rounding error is dropped. */
  beginForward(): void {
    for (const c of this.carries.values()) c.fill(0);
  }

  /**
   * The error-feedback buffer for this call (f16/q8): one per payload length, so the error of
   * each kind of all-reduce (attention, FFN, routed experts, each in its pieces) goes into the
   * next of the same kind, element by element; zeroed when a forward pass begins.
   */
  private carryFor(x: Float32Array): Float32Array | undefined {
    if (this.wire === 'f32') return undefined;
    let carry = this.carries.get(x.length);
    if (!carry) this.carries.set(x.length, (carry = new Float32Array(x.length)));
    return carry;
  }

  async allReduceSum(x: Float32Array, group?: GroupSum): Promise<void> {
    const size = this.comm.size;
    if (size === 1) return;
    const ex = this.exchange;
    if (ex) {
      await this.meter.time(0, ex.allReduceSum(x, this.carryFor(x), group));
      this.meter.bytes += (size - 1) * ex.payloadBytes(x.length);
      return;
    }
    if (this.wire !== 'f32' || size > 2 || (group && group.counts.some((c) => c !== 1))) {
      await this.gatherReduce(x, this.carryFor(x), group);
      return;
    }
    // 2 ranks of one part each: the communicator's sum is p0 + p1 on both (IEEE addition commutes)
    await this.meter.time(0, this.comm.allReduce(x));
    this.meter.bytes += allReduceWireBytes(x.byteLength, size, this.comm.lastAlgorithm);
  }

  /**
   * Every rank's part (or pieces, with `group`) gathered and summed by each rank in the fixed
   * tree (group.tree, else the flat pairwise tree over the ranks: (p0 + p1) + (p2 + p3)), with
   * the direct exchange's semantics: the order one node adds its leaves in, so 3 and 4 ranks
   * give one node's sums bit for bit (the communicator's own all-reduce adds in an order of
   * its algorithm's). Ranks with fewer pieces than the most pad their message. With f16/q8
   * each rank rounds its own part once (after adding its carried error) and every rank sums
   * the same rounded parts in f32: no partial sum is rounded again (a reduction on f16 or q8
   * data would round at every step).
   */
  private async gatherReduce(
    x: Float32Array,
    carry: Float32Array | undefined,
    group: GroupSum | undefined,
  ): Promise<void> {
    const size = this.comm.size;
    const rank = this.comm.rank;
    const counts = group?.counts ?? this.ones(size);
    const m = x.length / counts[rank]!;
    const n = Math.max(...counts) * m;
    if (carry) for (let i = 0; i < x.length; i++) x[i] = (x[i] as number) + (carry[i] as number);
    const words = wireLength(this.wire, n);
    const tree = group?.tree ?? flatTree(size);
    if (this.mine === undefined || this.mine.length !== words) {
      this.mine = wireBuffer(this.wire, n);
      this.gathered =
        this.wire === 'f32'
          ? new Float32Array(words * size)
          : this.wire === 'f16'
            ? new Uint16Array(words * size)
            : new Int32Array(words * size);
      this.own = new Float32Array(n);
      this.decoded = Array.from({ length: size }, () =>
        this.wire === 'f32' ? new Float32Array(0) : new Float32Array(n),
      );
    }
    const spares = treeSpares(tree);
    if (this.spare.length < spares || (spares > 0 && this.spare[0]!.length < m))
      this.spare = Array.from({ length: spares }, () => new Float32Array(m));
    const mine = this.mine;
    const all = this.gathered!;
    encodeWire(this.wire, x, mine);
    const dtype = this.wire === 'f16' ? ({ dtype: 'f16' } as const) : {};
    await this.meter.time(0, this.comm.allGather(mine, { out: all, ...dtype }));
    this.meter.bytes += (size - 1) * mine.byteLength;
    const own = this.own!.subarray(0, x.length);
    decodeWire(this.wire, mine, own);
    if (carry) for (let i = 0; i < x.length; i++) carry[i] = (x[i] as number) - (own[i] as number);
    const parts: Float32Array[] = [];
    for (let r = 0; r < size; r++) {
      const msg = all.subarray(r * words, (r + 1) * words);
      let values: Float32Array;
      if (r === rank) values = own;
      else if (this.wire === 'f32') values = msg as Float32Array;
      else {
        values = this.decoded[r]!.subarray(0, counts[r]! * m);
        decodeWire(this.wire, msg, values);
      }
      for (let q = 0; q < counts[r]!; q++) parts.push(values.subarray(q * m, (q + 1) * m));
    }
    sumTree(tree, parts, x.subarray(0, m), this.spare);
  }

  private onesCache: number[] = [];
  /** One part per rank. */
  private ones(size: number): readonly number[] {
    if (this.onesCache.length !== size) this.onesCache = new Array<number>(size).fill(1);
    return this.onesCache;
  }

  planLogits(needs: readonly LogitsNeed[]): void {
    this.planned = [...needs];
  }

  async allGatherLogits(local: Float32Array, full: Float32Array): Promise<void> {
    const size = this.comm.size;
    const need = this.planned.shift() ?? (this.logitsMode === 'argmax' ? 'argmax' : 'logits');
    if (need === 'none') return;
    if (size === 1) {
      if (local !== full) full.set(local);
      return;
    }
    if (need === 'argmax') {
      await this.gatherArgmax(local, full);
      return;
    }
    // Vocabulary slices differ in length by at most one: pad each to the longest, gather, unpad.
    const vocab = full.length;
    const longest = Math.ceil(vocab / size);
    const padded = new Float32Array(longest);
    padded.set(local);
    const all = new Float32Array(longest * size);
    await this.meter.time(padded.byteLength * (size - 1), this.comm.allGather(padded, { out: all }));
    let at = 0;
    for (let r = 0; r < size; r++) {
      const n = Math.floor((vocab * (r + 1)) / size) - Math.floor((vocab * r) / size);
      full.set(all.subarray(r * longest, r * longest + n), at);
      at += n;
    }
  }

  /** Each rank's best logit and its global id; `full` gets -Infinity except at those ids. */
  private async gatherArgmax(local: Float32Array, full: Float32Array): Promise<void> {
    const size = this.comm.size;
    const rank = this.comm.rank;
    const start = Math.floor((full.length * rank) / size);
    let best = 0;
    let nan = -1;
    for (let i = 0; i < local.length; i++) {
      const v = local[i] as number;
      if (v > (local[best] as number)) best = i;
      else if (v !== v && nan < 0) nan = i;
    }
    const mine = this.best;
    // a NaN in the slice travels in the best's place, at its own id, so the pick sees the row is broken
    if (nan >= 0) best = nan;
    mine[0] = local.length === 0 ? -Infinity : (local[best] as number);
    mine[1] = start + best;
    if (this.bestAll.length !== 2 * size) this.bestAll = new Float32Array(2 * size);
    const all = this.bestAll;
    const ex = this.exchange;
    await this.meter.time(
      8 * (size - 1),
      ex ? ex.allGather(mine, all) : this.comm.allGather(mine, { out: all }).then(() => undefined),
    );
    full.fill(-Infinity);
    for (let r = 0; r < size; r++) full[all[2 * r + 1] as number] = all[2 * r] as number;
  }
}
