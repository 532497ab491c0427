import { performance } from 'node:perf_hooks';
import { TandemError } from '../../errors/index.js';
import { yieldCore } from '../../fabric/shm-ffi.js';
import type { MemoryRegion, RemoteAddress } from '../../fabric/types.js';
import { dtypeCodes, viewAs, type DType, type DTypeArray } from '../../kernels/dtype.js';
import type { ReduceOp } from '../../kernels/reduce.js';
import { reduceFast as reduceInto } from '../../kernels/reduce-native.js';
import type { Call } from '../call.js';
import { AlgorithmCode, OpCode, ReduceCode, type Header } from '../header.js';
import { nextTurn, type Router } from '../router/index.js';
import { SlotLayout, SlotWrites, type Pair } from './slots.js';

/**
 * Payload bytes a board carries per rank and call: all-reduces up to this long use it (the
 * mesh's range, select.ts; a decode step's activations of a 4096-wide model in f32).
 */
export const BOARD_MAX = 16 * 1024;
/**
 * An entry: a head of four words (the call's seq, its codes: op | dtype << 8 | reduce << 16 |
 * algorithm << 24, its count, then the tag), the payload, then the tag again right after the
 * payload (4-byte aligned). A write is one RDMA WRITE of head, payload and tail, landing in
 * ascending order (shm places it so; RDMA hardware in practice): a head whose last word shows
 * the tag is whole, and so is a payload followed by it. A whole head that belongs to another
 * call is a mismatch, at once. Only the written bytes travel: 28 for 8 B.
 */
const HEAD = 16;
/** Bytes per entry (64-byte aligned; payloads start 16-byte aligned for any element type). */
const ENTRY = Math.ceil((HEAD + BOARD_MAX + 4) / 64) * 64;
/** A region holds one pair of entries (slots.ts) per communicator rank: the pair written by rank r is pair r. */
const layout = new SlotLayout(ENTRY);
/** How long a call polls synchronously for the others' entries before it waits through the event loop. */
const SPIN_MS = 0.2;
/**
 * While it waits, a call reads its region every time and polls the fabric only every this many
 * times: over shm the peers' entries land without its help (it only has to see them), and a
 * poll every 64th read is as fast there as none, while every 8th is measurably slower
 * (docs/collectives.md, "The board, and what a closure costs under tsx"); transports whose
 * writes land only when this side polls (tcp) still progress.
 */
const POLL_EVERY = 64;

/**
 * The communicator a board serves. A board call makes no Call (its spec, header template and
 * their garbage are a sizeable share of an 8 B all-reduce: docs/collectives.md, "Measured
 * facts behind the constants"); it asks for one only when it needs one: to wait for a
 * late peer, or to report a mismatch.
 */
export interface BoardOwner {
  /** The Call an all-reduce over messages would have made for board call `seq`. */
  boardCall(seq: number, dtype: DType, reduce: ReduceOp | 'mean', count: number): Call;
}

/**
 * Small all-reduces on a direct full mesh by one-sided writes, the way RDMA eager paths and
 * Open MPI's shared-memory "fast boxes" do it: every rank owns a region with two entries
 * (alternating call by call: the registered slots per peer of slots.ts) per other rank, and
 * each call writes its payload with a trailer straight into its entry on every peer (one RDMA
 * WRITE each, unsignaled), then polls its own region until every peer's tag is there and
 * folds ranks 0..n-1 in order, exactly as the mesh algorithm does (same bits on every rank
 * and as mesh over messages). No message, receive, completion, mailbox or credit is
 * involved: 2-rank 8 B all-reduce over shm, see docs/collectives.md.
 *
 * Entries carry the call's seq and codes, so ranks that disagree (another op, count, dtype)
 * fail with COLL_MISMATCH; a peer that made a call of another kind instead is seen by the
 * message it sends meanwhile (same seq), or else by the timeout.
 */
export class Board {
  /** Board calls so far (the tag of the latest; the entry parity alternates with it). */
  private calls = 0;
  /** The running call's entry parity and tail word (see tailWord()). */
  private parity = 0;
  private tail = 0;
  /** arrived(), as the predicate Router.spinUntil takes (one closure for all calls). */
  private readonly here = (): boolean => this.arrived();
  /** The running call's seq, codes and count, as its entries must show them. */
  private seq = 0;
  private codes = 0;
  private count = 0;
  private dtype: DType = 'f32';
  private reduce: ReduceOp | 'mean' = 'sum';
  private readonly words: Uint32Array;
  /** The puts of this rank's entry to every peer, by parity. */
  private readonly writes: SlotWrites;
  /** The peers' payloads as arrays of the last call's dtype and length: views[parity][r]. */
  private views: (DTypeArray | undefined)[][] = [];
  private viewDtype = '';
  private viewBytes = -1;
  /** The fold's accumulator, and the payload's place in `out`, as arrays of the last call's dtype and length. */
  private acc: DTypeArray = new Uint8Array(0) as unknown as DTypeArray;
  private outPayload: DTypeArray = new Uint8Array(0) as unknown as DTypeArray;
  private readonly accBuffer = new ArrayBuffer(BOARD_MAX);

  private constructor(
    private readonly router: Router,
    private readonly owner: BoardOwner,
    private readonly rank: number,
    private readonly members: readonly number[],
    /** Entries written by peers: from communicator rank r, parity p at layout.offset(r, p). */
    private readonly mine: MemoryRegion,
    /** What this rank writes out (staged here, then put to every peer). */
    private readonly out: MemoryRegion,
    private readonly outWords: Uint32Array,
    /** remotes[r][p]: this rank's parity-p entry in rank r's region (undefined for this rank). */
    remotes: (Pair<RemoteAddress> | undefined)[],
  ) {
    const b = mine.buffer;
    this.words = new Uint32Array(b.buffer, b.byteOffset, b.byteLength >>> 2);
    const put = (r: number, p: number): ReturnType<Router['putRequest']> | undefined => {
      const remote = remotes[r];
      return remote === undefined
        ? undefined
        : router.putRequest(members[r] as number, out, 0, HEAD, remote[p as 0 | 1]);
    };
    this.writes = new SlotWrites(members.length, put, (r, wr) => router.put(members[r] as number, wr));
  }

  /** Bytes of the region each rank registers for a board of `size` ranks. */
  static regionBytes(size: number): number {
    return layout.regionBytes(size);
  }

  /**
   * Allocates this rank's regions, or undefined when the fabric refuses (the communicator
   * then goes without a board: every rank learns of every other's refusal in open()).
   */
  static allocate(router: Router, size: number): { mine: MemoryRegion; out: MemoryRegion } | undefined {
    let mine: MemoryRegion | undefined;
    try {
      mine = router.allocate(Board.regionBytes(size));
      if (mine.buffer.byteOffset % 4 !== 0) throw new Error('unaligned region');
      return { mine, out: router.register(new Uint8Array(ENTRY)) };
    } catch {
      mine?.deregister();
      return undefined;
    }
  }

  /** Every rank's [ok, addr low, addr high, rkey] gathered: the board, or undefined (regions released) unless all have one. */
  static open(
    router: Router,
    owner: BoardOwner,
    rank: number,
    members: readonly number[],
    regions: { mine: MemoryRegion; out: MemoryRegion } | undefined,
    table: Int32Array,
  ): Board | undefined {
    const size = members.length;
    const all = Array.from({ length: size }, (_, r) => table[4 * r] === 1).every(Boolean);
    if (!all || regions === undefined) {
      regions?.mine.deregister();
      regions?.out.deregister();
      return undefined;
    }
    const remotes = Array.from({ length: size }, (_, r) => {
      if (r === rank) return undefined;
      const base =
        (BigInt((table[4 * r + 2] as number) >>> 0) << 32n) | BigInt((table[4 * r + 1] as number) >>> 0);
      const rkey = (table[4 * r + 3] as number) >>> 0;
      return layout.remote(base, rkey, rank);
    });
    const o = regions.out.buffer;
    return new Board(
      router,
      owner,
      rank,
      members,
      regions.mine,
      regions.out,
      new Uint32Array(o.buffer, o.byteOffset, ENTRY >>> 2),
      remotes,
    );
  }

  /** What this rank contributes to the exchange open() consumes. */
  static describe(regions: { mine: MemoryRegion } | undefined): Int32Array {
    if (regions === undefined) return new Int32Array(4);
    const addr = regions.mine.addr;
    return Int32Array.of(1, Number(addr & 0xffffffffn) | 0, Number(addr >> 32n) | 0, regions.mine.rkey | 0);
  }

  /**
   * In place, `data` (at most BOARD_MAX bytes) becomes the reduction over all ranks: the
   * all-reduce numbered `seq` on this communicator. Returns undefined when done synchronously
   * (the usual case), else a promise for the rest. A `mean` is left summed (the caller divides).
   */
  allReduce(
    seq: number,
    dtype: DType,
    reduce: ReduceOp | 'mean',
    data: DTypeArray,
  ): Promise<void> | undefined {
    let tag = (this.calls + 1) >>> 0;
    if (tag === 0) tag = 1;
    this.calls = tag;
    const parity = (this.parity = tag & 1);
    const bytes = data.byteLength;
    if (dtype !== this.viewDtype || bytes !== this.viewBytes) this.view(dtype, bytes);
    const tail = (this.tail = tailWord(bytes));
    const ow = this.outWords;
    ow[0] = this.seq = seq >>> 0;
    if (dtype !== this.dtype || reduce !== this.reduce || this.codes === 0)
      this.codes = codesOf(dtype, reduce);
    ow[1] = this.codes;
    this.dtype = dtype;
    this.reduce = reduce;
    ow[2] = this.count = data.length >>> 0;
    ow[3] = tag;
    this.outPayload.set(data);
    ow[tail] = tag;
    this.writes.writeAll(parity, 4 * tail + 4);
    if (!this.arrived() && !this.router.spinUntil(this.here, SPIN_MS, POLL_EVERY))
      return this.finishLater(this.call(), data);
    this.fold(data, parity);
    return undefined;
  }

  /** The running board call's Call (made on demand). */
  private call(): Call {
    return this.owner.boardCall(this.seq, this.dtype, this.reduce, this.count);
  }

  /** The peers' payloads, the accumulator and the out payload as arrays of `dtype` over `bytes`. */
  private view(dtype: DType, bytes: number): void {
    this.views = [0, 1].map((p) =>
      this.members.map((_, r) =>
        r === this.rank
          ? undefined
          : viewAs(dtype, layout.local(this.mine.buffer, r)[p as 0 | 1].subarray(HEAD, HEAD + bytes)),
      ),
    );
    this.acc = viewAs(dtype, new Uint8Array(this.accBuffer, 0, bytes));
    this.outPayload = viewAs(dtype, this.out.buffer.subarray(HEAD, HEAD + bytes));
    this.viewDtype = dtype;
    this.viewBytes = bytes;
  }

  /**
   * Whether every peer's entry of this call is in: head and tail tagged (the tail where this
   * call's length puts it; an entry of another call is in once its head is: fold() refuses it).
   */
  private arrived(): boolean {
    const w = this.words;
    const tag = this.calls;
    const parity = this.parity;
    const tail = this.tail;
    for (let r = 0; r < this.members.length; r++) {
      if (r === this.rank) continue;
      const at = layout.offset(r, parity) >>> 2;
      // atomic loads: another process writes these words, and a plain load may be hoisted out of a polling loop
      if (
        Atomics.load(w, at + 3) !== tag ||
        (Atomics.load(w, at + tail) !== tag &&
          w[at] === this.seq &&
          w[at + 1] === this.codes &&
          w[at + 2] === this.count)
      )
        return false;
    }
    return true;
  }

  private async finishLater(call: Call, data: DTypeArray): Promise<void> {
    const router = this.router;
    const deadline = performance.now() + call.comm.timeoutMs;
    const [here, tag, parity] = [this.here, this.calls, this.parity];
    for (;;) {
      // A peer this late has most likely lost its core (to a compiler or GC thread, or another
      // process): give ours away first, so that it runs now and not after a time slice.
      yieldCore();
      await nextTurn(); // the pump makes progress meanwhile (and connection events are seen)
      if (router.aborted) throw router.aborted;
      if (here() || router.spinUntil(here, SPIN_MS, POLL_EVERY)) break;
      if (router.aborted) throw router.aborted;
      this.checkMessages(call);
      if (performance.now() > deadline) {
        const missing = this.members.filter(
          (_, r) => r !== this.rank && this.words[(layout.offset(r, parity) >>> 2) + 3] !== tag,
        );
        const e = new TandemError(
          'COLL_TIMEOUT',
          `rank ${this.members[this.rank]} waited ${call.comm.timeoutMs} ms for rank ${missing.join(', ')} in all-reduce #${call.spec.seq}`,
          {
            hint: `check that rank ${missing.join(', ')} is alive and makes the same sequence of collective calls, or raise the communicator's timeoutMs`,
            details: { rank: this.members[this.rank], peer: missing[0], timeoutMs: call.comm.timeoutMs },
          },
        );
        router.abort(e);
        throw e;
      }
    }
    this.fold(data, parity);
  }

  /** A message of this very call from a peer means it made another kind of call: COLL_MISMATCH. */
  private checkMessages(call: Call): void {
    for (let r = 0; r < this.members.length; r++) {
      if (r === this.rank) continue;
      const h = this.router.peek(call.comm.commId, 0, this.members[r] as number, 0);
      if (h !== undefined && h.seq === call.header.seq) {
        const e = call.verify(h, r, h.totalBytes, h.step);
        if (e) throw e;
      }
    }
  }

  /** Checks every entry against this call, then folds ranks 0..n-1 into `data`. */
  private fold(data: DTypeArray, parity: number): void {
    const w = this.words;
    const dtype = this.dtype;
    const op = this.reduce === 'mean' ? 'sum' : this.reduce;
    const views = this.views[parity] as (DTypeArray | undefined)[];
    const acc = this.acc;
    for (let r = 0; r < this.members.length; r++) {
      let part: DTypeArray = data;
      if (r !== this.rank) {
        const t = layout.offset(r, parity) >>> 2;
        if (w[t] !== this.seq || w[t + 1] !== this.codes || w[t + 2] !== this.count)
          throw this.mismatch(r, t, data.byteLength);
        part = views[r] as DTypeArray;
      }
      if (r === 0) acc.set(part);
      else reduceInto(op, dtype, acc, part);
    }
    data.set(acc);
  }

  /** COLL_MISMATCH for rank r's entry at word t, which shows another call than this one. */
  private mismatch(r: number, t: number, bytes: number): Error {
    const w = this.words;
    const call = this.call();
    const c = w[t + 1] as number;
    const theirs: Header = {
      ...call.header,
      seq: w[t] as number,
      op: c & 255,
      dtype: (c >>> 8) & 255,
      reduce: (c >>> 16) & 255,
      algorithm: c >>> 24,
      count: w[t + 2] as number,
      totalBytes: bytes,
    };
    return call.verify(theirs, r, bytes) ?? new Error('unreachable: a differing entry passed the check');
  }

  /** Releases the regions (the communicator is closing). */
  close(): void {
    for (const mr of [this.mine, this.out]) {
      try {
        mr.deregister();
      } catch {
        /* already gone with its device */
      }
    }
  }
}

/** The word index, in an entry, of the tail tag after `bytes` of payload. */
function tailWord(bytes: number): number {
  return (HEAD + ((bytes + 3) & ~3)) >>> 2;
}

/** An all-reduce's op, dtype, reduce and algorithm codes, as its message headers carry them. */
function codesOf(dtype: DType, reduce: ReduceOp | 'mean'): number {
  return (
    (OpCode['all-reduce'] |
      (dtypeCodes[dtype] << 8) |
      (ReduceCode[reduce] << 16) |
      (AlgorithmCode.mesh << 24)) >>>
    0
  );
}
