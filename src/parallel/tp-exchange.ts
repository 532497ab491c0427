import { DirectExchange, type DirectExchangeOptions } from '../collectives/index.js';
import type { GroupSum } from '../engine/model/leaves.js';
import { wireCodecs, type WireFormat } from './wire.js';

export interface TpExchangeOptions extends Omit<DirectExchangeOptions, 'codec'> {
  /** How partial sums travel (default f32). */
  wire?: WireFormat;
}

/**
 * A tensor-parallel group's direct exchange (collectives' DirectExchange: one-sided writes
 * into every peer's slots, then a fixed-order sum), with the group's wire format as its part
 * codec and its row-parallel group sums as the pieces' tree. Every all-reduce of a decode
 * step and the vocabulary head's argmax exchange go through it.
 */
export class TpExchange {
  private constructor(
    private readonly direct: DirectExchange,
    readonly wire: WireFormat,
  ) {}

  /** Collective over `o.group`: see DirectExchange.connect. */
  static async connect(o: TpExchangeOptions): Promise<TpExchange> {
    const { wire = 'f32', ...rest } = o;
    return new TpExchange(await DirectExchange.connect({ ...rest, codec: wireCodecs[wire] }), wire);
  }

  get rank(): number {
    return this.direct.rank;
  }
  get size(): number {
    return this.direct.size;
  }
  /** Largest elements per single exchange. */
  get chunk(): number {
    return this.direct.chunk;
  }
  /** Milliseconds spent waiting for the peers' parts (summed over calls). */
  get waitMs(): number {
    return this.direct.waitMs;
  }
  get calls(): number {
    return this.direct.calls;
  }
  /** Bytes written to each peer of the group so far (and written here by each: parts are symmetric). */
  get peerBytes(): number {
    return this.direct.peerBytes;
  }
  /** Bytes of the outbox and inboxes (what `exchangeBufferBytes` predicts). */
  get bufferBytes(): number {
    return this.direct.bufferBytes;
  }

  /** Bytes one rank sends to each peer for `count` values in `wire` (default this exchange's). */
  payloadBytes(count: number, wire: WireFormat = this.wire): number {
    return wireCodecs[wire].bytes(count);
  }

  /**
   * In place: x becomes the sum over the group, every part rounded to the wire format first
   * (DirectExchange.allReduceSum). With `group`, x holds this rank's pieces and x[0, m)
   * becomes the sum of every rank's pieces in the order of `group.tree` (leaves.ts); with
   * `carry`, error feedback for the f16 and q8 wires.
   */
  allReduceSum(x: Float32Array, carry?: Float32Array, group?: GroupSum): Promise<void> {
    return this.direct.allReduceSum(x, carry, group);
  }

  /** Every rank's `mine` (same length on all, f32 exact) into `out` [size, mine.length] in rank order. */
  allGather(mine: Float32Array, out: Float32Array): Promise<void> {
    return this.direct.allGather(mine, out);
  }

  /** Ends every wait at once (a peer was lost elsewhere). */
  abort(reason: string): void {
    this.direct.abort(reason);
  }

  close(): Promise<void> {
    return this.direct.close();
  }
}
