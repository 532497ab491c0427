import { performance } from 'node:perf_hooks';
import { isTandemError, TandemError } from '../../errors/index.js';
import { completionError, type CompletionQueue, type ProviderName, type SendWr } from '../../fabric/index.js';
import { copyBytes } from '../../kernels/copy.js';
import { bytesOf } from '../../kernels/dtype.js';
import {
  flatTree,
  loadFastReduce,
  reduceFast,
  sumTree,
  treeSpares,
  type SumTree,
} from '../../kernels/reduce-native.js';
import type { Communicator } from '../communicator.js';
import {
  connectExchange,
  DEFAULT_CHUNK,
  exchangeSlotBytes,
  type ExchangeLinks,
  type ExchangePeer,
} from './exchange-connect.js';
import { SlotLayout, SlotWrites, type Pair } from './slots.js';
import { exactF32, type PartCodec, type SlotViews } from './part-codec.js';
import { ExchangeProfile, profiling, stamp, stampAt } from './exchange-profile.js';

/**
 * A group's direct exchange: every all-reduce of a tensor-parallel decode step (two per
 * layer) and the vocabulary head's argmax exchange. Each rank writes its whole part straight
 * into its slot on every peer (slots.ts: one RDMA write with immediate per peer, no router,
 * no per-call allocation), then sums every rank's part in a fixed tree (sumTree): the same
 * additions in the same order on every rank, so the results are bit-identical everywhere;
 * the caller's tree (PiecesSum) makes them the order one node adds its leaves in.
 *
 * With a rounding codec (f16, q8: part-codec.ts) every part (the rank's own included) is
 * rounded once, by its owner, and every rank sums the same rounded parts: there is no
 * re-quantisation of partial sums and the ranks never disagree. A mesh costs (size - 1) x
 * the vector per rank, the right trade for the few nodes and small vectors (a hidden state:
 * 8 KiB) of a decode step.
 *
 * Each peer has an inbox of two slots here, and this rank an outbox of two (one per parity):
 * exchange k uses slot k % 2, and its write carries k as the immediate.
 */

/**
 * How a group adds its ranks' pieces: pieces per rank, and the tree over all of them in rank
 * order (leaf i is the i-th piece counting rank 0's first). Without one, each rank hands over
 * one piece and the ranks are summed in the flat pairwise tree ((p0 + p1) + (p2 + p3) for 4).
 */
export interface PiecesSum {
  counts: readonly number[];
  tree: SumTree;
}

export interface DirectExchangeOptions {
  /** The group (its collectives are used only to set up the exchange). */
  group: Communicator;
  provider: ProviderName;
  /** This rank's fabric host (where peers can reach it). */
  host: string;
  secret: string;
  /** How parts travel (default exact f32). */
  codec?: PartCodec;
  /** Deadline of every wait (default 30000 ms). */
  timeoutMs?: number;
  /** Largest elements per single exchange (default 512 Ki). */
  chunk?: number;
  /**
   * How the waits for the peers' parts busy-poll (the fabric's WaitOptions.spin): default
   * adaptive. A peer's part comes when it has computed its half of a layer, often later than
   * the adaptive window, and a sleeping wait costs a wake-up; when every rank has a core of
   * its own, spinning through the compute is free (docs/parallel.md).
   */
  spin?: boolean | number;
}

/** A slot's bytes seen as f32, f16 bits and bytes, built once (slotViews). */
function slotViews(slot: Uint8Array, chunk: number): SlotViews {
  return {
    f32: new Float32Array(slot.buffer, slot.byteOffset, chunk),
    u16: new Uint16Array(slot.buffer, slot.byteOffset, chunk),
    u8: slot,
  };
}

export class DirectExchange {
  /** Milliseconds spent waiting for the peers' parts (summed over calls). */
  waitMs = 0;
  calls = 0;
  /**
   * Bytes written into each peer's slot so far: every exchange writes one part of the same
   * length to every peer and gets one of that length from each, so it is also what each peer
   * wrote here.
   */
  peerBytes = 0;
  private seq = 0;
  private readonly arrived = [0, 0];
  private readonly writes: SlotWrites;
  private readonly outViews: Pair<SlotViews>;
  private readonly inViews: (Pair<SlotViews> | undefined)[];
  private readonly own: Float32Array;
  /** Each peer's part decoded by a rounding codec (unused for exact ones, whose parts are read in place). */
  private readonly decoded: Float32Array[];
  /** sumTree's spare buffers (grown to what a group's tree needs). */
  private readonly spare: Float32Array[];
  private readonly parts: Float32Array[] = [];
  /** A chunk's runs of this rank's pieces, and of their carried errors (pieces sums; allocated on first use). */
  private packedRuns: Float32Array | undefined;
  private packedErrors: Float32Array | undefined;
  private aborted: string | undefined;
  private readonly profile: ExchangeProfile;

  private readonly cq: CompletionQueue;
  private readonly peers: (ExchangePeer | undefined)[];

  private constructor(
    readonly rank: number,
    readonly size: number,
    /** The exchange's own device, listener, completion queue, outbox and connections (exchange-connect.ts). */
    private readonly links: ExchangeLinks,
    slotBytes: number,
    readonly chunk: number,
    readonly codec: PartCodec,
    private readonly timeoutMs: number,
    private readonly spin: boolean | number,
  ) {
    const { cq, outbox, peers } = links;
    this.cq = cq;
    this.peers = peers;
    const layout = new SlotLayout(slotBytes);
    const views = (region: Uint8Array): Pair<SlotViews> => {
      const [a, b] = layout.local(region, 0);
      return [slotViews(a, chunk), slotViews(b, chunk)];
    };
    this.outViews = views(outbox.buffer);
    this.inViews = peers.map((p) => (p ? views(p.inbox.buffer) : undefined));
    const write = (r: number, parity: number): SendWr | undefined => {
      const p = peers[r];
      if (p === undefined) return undefined;
      const remote = layout.remote(p.remote.addr, p.remote.rkey, 0)[parity as 0 | 1];
      return {
        wrId: 0,
        opcode: 'write_imm',
        imm: 0,
        sgl: [outbox.sge(layout.offset(0, parity), 0)],
        remote,
        signaled: false,
      };
    };
    this.writes = new SlotWrites(size, write, (r, wr) => (peers[r] as ExchangePeer).qp.postSend(wr));
    this.profile = new ExchangeProfile(rank, size);
    this.own = new Float32Array(chunk);
    this.decoded = peers.map((p) => (p && !codec.exact ? new Float32Array(chunk) : new Float32Array(0)));
    this.spare = Array.from({ length: treeSpares(flatTree(size)) }, () => new Float32Array(chunk));
  }

  /** Collective over `group`: every member listens, learns the others' addresses and connects to each. */
  static async connect(o: DirectExchangeOptions): Promise<DirectExchange> {
    const chunk = o.chunk ?? DEFAULT_CHUNK;
    const timeoutMs = o.timeoutMs ?? 30_000;
    const slotBytes = exchangeSlotBytes(chunk);
    await loadFastReduce();
    const { group, provider, host, secret } = o;
    const links = await connectExchange({ group, provider, host, secret, timeoutMs, slotBytes });
    const codec = o.codec ?? exactF32;
    return new DirectExchange(
      group.rank,
      group.size,
      links,
      slotBytes,
      chunk,
      codec,
      timeoutMs,
      o.spin ?? true,
    );
  }

  /** Bytes one rank sends to each peer for `count` values with `codec` (default this exchange's). */
  payloadBytes(count: number, codec: PartCodec = this.codec): number {
    return codec.bytes(count);
  }

  /**
   * In place: x becomes the sum over the group (every part encoded by the codec first).
   * With `pieces` (exact row-parallel sums), x holds this rank's pieces [pieces, m] and
   * x[0, m) becomes the sum of every rank's pieces in the order of `pieces.tree`.
   * With `carry` (same length as x; rounding codecs): error feedback. This rank's rounding
   * error of the previous call is added to its part before rounding, and `carry` receives the
   * new error. For the all-reduces of one forward pass, which all add into the same residual
   * stream, the rounding errors then no longer pile up layer after layer: the stream misses
   * only the last call's error, not the sum of every call's.
   */
  async allReduceSum(x: Float32Array, carry?: Float32Array, pieces?: PiecesSum): Promise<void> {
    const feedback = carry !== undefined && !this.codec.exact;
    const counts = pieces?.counts;
    const mine = counts ? counts[this.rank]! : 1;
    const m = x.length / mine;
    // a chunk carries every piece's run [at, at + step) of every rank
    const step = counts ? Math.floor(this.chunk / Math.max(...counts)) : this.chunk;
    for (let at = 0; at < m; at += step) {
      const len = Math.min(m - at, step);
      let part = x.subarray(at, at + len);
      if (mine > 1) {
        part = (this.packedRuns ??= new Float32Array(this.chunk)).subarray(0, mine * len);
        for (let q = 0; q < mine; q++) part.set(x.subarray(q * m + at, q * m + at + len), q * len);
      }
      const c = feedback ? this.carryRun(carry, m, at, len, mine) : undefined;
      if (c) for (let i = 0; i < part.length; i++) part[i] = (part[i] as number) + (c[i] as number);
      await this.exchange(part, this.codec);
      this.sum(part, len, this.codec, c, pieces);
      if (mine > 1) {
        x.set(part.subarray(0, len), at);
        if (c) for (let q = 0; q < mine; q++) carry!.set(c.subarray(q * len, (q + 1) * len), q * m + at);
      }
    }
  }

  /** The carried errors of a chunk's runs, packed like the chunk (the carry itself for one piece). */
  private carryRun(carry: Float32Array, m: number, at: number, len: number, pieces: number): Float32Array {
    if (pieces === 1) return carry.subarray(at, at + len);
    const c = (this.packedErrors ??= new Float32Array(this.chunk)).subarray(0, pieces * len);
    for (let q = 0; q < pieces; q++) c.set(carry.subarray(q * m + at, q * m + at + len), q * len);
    return c;
  }

  /** Every rank's `mine` (same length on all, f32 exact) into `out` [size, mine.length] in rank order. */
  async allGather(mine: Float32Array, out: Float32Array): Promise<void> {
    const n = mine.length;
    if (n > this.chunk)
      throw new TandemError(
        'PAR_EXCHANGE',
        `an exchange gather of ${n} values exceeds the chunk of ${this.chunk}`,
        {
          hint: 'gather through the communicator instead',
        },
      );
    await this.exchange(mine, exactF32);
    const slot = (this.seq - 1) & 1;
    for (let r = 0; r < this.size; r++) {
      const src = r === this.rank ? mine : (this.inViews[r]![slot]!.f32.subarray(0, n) as Float32Array);
      copyBytes(bytesOf(out), r * n * 4, bytesOf(src));
    }
  }

  /** Writes this rank's part of exchange `seq` into its slot on every peer and waits for theirs. */
  private async exchange(x: Float32Array, codec: PartCodec): Promise<void> {
    if (this.aborted !== undefined)
      throw new TandemError(
        'PAR_EXCHANGE',
        `rank ${this.rank}: the tensor-parallel exchange is closed (${this.aborted})`,
        {
          hint: 'load the model again',
        },
      );
    const seq = this.seq++;
    const slot = seq & 1;
    const n = x.length;
    const out = this.outViews[slot as 0 | 1];
    codec.encode(x, out);
    const sentAt = performance.timeOrigin + performance.now();
    const bytes = profiling ? stamp(out, codec.bytes(n), sentAt) : codec.bytes(n);
    const imm = seq >>> 0;
    this.writes.writeAll(slot, bytes, imm);
    this.peerBytes += bytes;
    const t0 = performance.now();
    try {
      // Until every peer's part of exchange `seq` is in its slot: each write's immediate (its
      // exchange number) completes a receive here. A peer may be one exchange ahead
      // (slots.ts), so a part of seq + 1 is counted for the other parity.
      while (this.arrived[slot]! < this.size - 1) {
        for (const wc of await this.cq.wait({ timeoutMs: this.timeoutMs, spin: this.spin })) {
          if (wc.status !== 'success') throw completionError(wc);
          if (wc.opcode !== 'recv_imm') continue;
          const from = wc.wrId;
          this.peers[from]!.qp.postRecv({ wrId: from, sgl: [] });
          const got = wc.imm ?? -1;
          if (got !== imm && got !== (seq + 1) >>> 0)
            throw new TandemError(
              'PAR_EXCHANGE',
              `rank ${this.rank}: exchange ${seq} got part ${got} from rank ${from}`,
              {
                hint: 'every rank of a tensor-parallel group must run the same exchanges in the same order',
              },
            );
          this.arrived[got & 1]!++;
        }
      }
    } catch (e) {
      throw this.failed(e);
    } finally {
      this.waitMs += performance.now() - t0;
      this.calls++;
    }
    this.arrived[slot] = 0;
    if (profiling) this.profile.record(this.inViews, slot as 0 | 1, sentAt, stampAt(codec.bytes(n)));
  }

  /**
   * x[0, len) = the sum of every rank's part (own part rounded like the others) in the fixed
   * tree: pieces.tree over every rank's pieces, else the flat pairwise tree over the ranks
   * ((p0 + p1) + (p2 + p3) for 4). x holds this rank's part [pieces, len]. The adds run in
   * the native reduce kernel. With 2 ranks of one piece each and an exact codec, x already
   * holds this rank's part and the other's is added to it in place: p1 + p0 is bit for bit
   * p0 + p1 (IEEE addition commutes).
   */
  private sum(
    x: Float32Array,
    len: number,
    codec: PartCodec,
    carry: Float32Array | undefined,
    pieces: PiecesSum | undefined,
  ): void {
    const slot = ((this.seq - 1) & 1) as 0 | 1;
    const counts = pieces?.counts;
    if (codec.exact && this.size === 2 && (!counts || (counts[0] === 1 && counts[1] === 1))) {
      reduceFast('sum', 'f32', x, this.inViews[1 - this.rank]![slot].f32.subarray(0, len));
      return;
    }
    const n = x.length;
    const own = this.own.subarray(0, n);
    this.decode(this.outViews[slot], own, x, codec);
    if (carry) for (let i = 0; i < n; i++) carry[i] = (x[i] as number) - (own[i] as number);
    const parts = this.parts;
    parts.length = 0;
    for (let r = 0; r < this.size; r++) {
      const count = counts ? counts[r]! : 1;
      const view = this.inViews[r]?.[slot];
      const values =
        r === this.rank
          ? own
          : codec.exact
            ? view!.f32.subarray(0, count * len)
            : this.decode(view!, this.decoded[r]!.subarray(0, count * len), undefined, codec);
      for (let q = 0; q < count; q++) parts.push(values.subarray(q * len, (q + 1) * len));
    }
    const tree = pieces?.tree ?? flatTree(this.size);
    const spares = treeSpares(tree);
    while (this.spare.length < spares) this.spare.push(new Float32Array(this.chunk));
    sumTree(tree, parts, x.subarray(0, len), this.spare);
  }

  /** The slot's values as f32 in `into` (an exact codec's own part: `exact` itself; a peer's: the slot in place). */
  private decode(
    v: SlotViews,
    into: Float32Array,
    exact: Float32Array | undefined,
    codec: PartCodec,
  ): Float32Array {
    if (codec.exact) {
      if (exact) into.set(exact);
      else return v.f32.subarray(0, into.length);
    } else codec.decode(v, into);
    return into;
  }

  private failed(e: unknown): TandemError {
    if (isTandemError(e) && e.code === 'PAR_EXCHANGE') return e;
    const cause = e as Error;
    const lost =
      isTandemError(e) && ['FABRIC_WORK_FAILED', 'FABRIC_WAIT_TIMEOUT', 'ABORTED'].includes(e.code);
    return new TandemError(
      lost ? 'PAR_PEER_LOST' : 'PAR_EXCHANGE',
      `rank ${this.rank} of a ${this.size}-rank tensor-parallel group: exchange ${this.seq - 1} failed: ${cause.message}`,
      { hint: 'a node of the group stopped or is unreachable: check the nodes and run again', cause: e },
    );
  }

  /** Bytes of the outbox and inboxes (what `exchangeBufferBytes` predicts). */
  get bufferBytes(): number {
    return this.peers.reduce((sum, p) => sum + (p ? p.inbox.length : 0), this.links.outbox.length);
  }

  /** Ends every wait at once (a peer was lost elsewhere). */
  abort(reason: string): void {
    this.aborted ??= reason;
    this.cq.abort(reason);
  }

  async close(): Promise<void> {
    this.aborted ??= 'closed';
    for (const p of this.peers) if (p) await p.qp.close().catch(() => undefined);
    await this.links.listener.close().catch(() => undefined);
    await this.links.device.close().catch(() => undefined);
  }
}
