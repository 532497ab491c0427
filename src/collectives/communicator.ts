import { TandemError } from '../errors/index.js';
import type { Device } from '../fabric/index.js';
import { allocate, bytesPerElement, viewAs, type DType, type DTypeArray } from '../kernels/dtype.js';
import { divideInPlace, type ReduceOp } from '../kernels/reduce.js';
import { fullMeshGraph, inducedGraph, isFullMesh } from '../topology/rank-graph.js';
import { findRing, spanningTree, type Tree } from '../topology/routing.js';
import { allReduceMesh, allReduceRhd, allReduceRing, allReduceTree } from './all-reduce.js';
import { allGatherMesh, allGatherRhd, allGatherRing, allGatherTree } from './all-gather.js';
import { bounded } from '../util/bounded.js';
import { Board, BOARD_MAX } from './one-sided/board.js';
import { allToAllPairwise } from './all-to-all.js';
import { broadcastMesh, broadcastRing, broadcastTree } from './broadcast.js';
import { Call, sub, type Algorithm, type CallSpec, type CommCore } from './call.js';
import { chunkRanges, type Range } from './chunks.js';
import { adjacency, type Graph } from './graph.js';
import { reduceScatterMesh, reduceScatterRhd, reduceScatterRing } from './reduce-scatter.js';
import type { Router } from './router/index.js';
import type { TopologyFacts } from './select.js';
import {
  badArg,
  allReduceArgs,
  checkCount,
  checkCounts,
  checkPeer,
  checkRoot,
  dataDType,
  pickAlgorithm,
  type AllReduceOptions,
  type CallOptions,
} from './call-args.js';

export type { AllReduceOptions, CallOptions } from './call-args.js';

/** The reusable scratch of a communicator grows up to this many bytes. */
const SCRATCH_KEEP = 16 << 20;
/** What a call that finished synchronously returns. */
const DONE: Promise<void> = Promise.resolve();

/**
 * A group of ranks that run collectives together. Calls on one communicator run one after
 * another in call order (each rank must make the same calls in the same order); a failed call
 * aborts the communicator and every later call fails fast with COLL_ABORTED.
 */
export class Communicator implements CommCore {
  /** The algorithm the last call used (for tests and benchmarks). */
  lastAlgorithm: Algorithm | undefined;
  private seq = 0;
  /** The latest call, and how many calls are queued or running (serial() chains on it while any are). */
  private last: Promise<unknown> = Promise.resolve();
  private calls = 0;
  private readonly sendSeq = new Map<number, number>();
  private readonly recvSeq = new Map<number, number>();
  private readonly adj: number[][];
  private readonly ring: number[];
  /** What the choice of algorithm looks at (one object for the communicator's life: none per call). */
  private readonly facts: TopologyFacts;
  private readonly trees = new Map<number, Tree>();
  private closed = false;
  private readonly scratchBuffers: ArrayBuffer[] = [];
  /** One-sided small all-reduces (see Board): opened by the first call that can use one; null when it cannot be had. */
  private board: Board | null | undefined;

  constructor(
    readonly rank: number,
    readonly size: number,
    readonly members: readonly number[],
    readonly commId: number,
    readonly router: Router,
    readonly timeoutMs: number,
    readonly graph: Graph,
    private readonly owned: { device: Device | undefined } | undefined,
    readonly wires = 1,
  ) {
    let adj: number[][];
    try {
      adj = adjacency(graph);
    } catch {
      adj = adjacency(fullMeshGraph(size)); // members not linked among themselves: everything is relayed
    }
    this.adj = adj;
    const fullMesh = isFullMesh(adj);
    const ring = findRing(adj);
    this.facts = { size, fullMesh, hasRing: ring !== undefined };
    this.ring = ring ?? Array.from({ length: size }, (_, i) => i);
  }

  scratch(dtype: DType, count: number, slot = 0): DTypeArray {
    const bytes = count * bytesPerElement(dtype);
    let buffer = this.scratchBuffers[slot];
    // kept for the next call up to SCRATCH_KEEP bytes; larger ones are the call's own
    if (buffer === undefined || bytes > buffer.byteLength) {
      if (bytes > SCRATCH_KEEP) return allocate(dtype, count);
      this.scratchBuffers[slot] = buffer = new ArrayBuffer(bytes);
    }
    return viewAs(dtype, new Uint8Array(buffer, 0, bytes));
  }

  /** Fragments this rank forwarded for other ranks so far (the relaying at work). */
  get relayed(): number {
    return this.router.relayed;
  }

  /** One-sided writes this rank made so far (small all-reduces on a direct full mesh: see Board). */
  get puts(): number {
    return this.router.puts;
  }

  private tree(root: number): Tree {
    let t = this.trees.get(root);
    if (!t) this.trees.set(root, (t = spanningTree(this.adj, root)));
    return t;
  }

  /**
   * Runs calls one at a time, in call order; fails fast once aborted. With no call in
   * progress the work starts at once, without a promise hop (a small all-reduce pays each).
   */
  private serial<A extends unknown[], T>(
    work: (this: Communicator, ...args: A) => Promise<T>,
    ...args: A
  ): Promise<T> {
    this.calls++;
    // a method and its arguments rather than a closure per call: see docs/architecture.md, "Hot paths under tsx"
    const p =
      this.calls === 1
        ? this.enter(work, args)
        : this.last.then(
            () => this.enter(work, args),
            () => this.enter(work, args),
          );
    this.last = p;
    return p;
  }

  /** One call of serial(), in its turn. */
  private async enter<A extends unknown[], T>(
    work: (this: Communicator, ...args: A) => Promise<T>,
    args: A,
  ): Promise<T> {
    let started = false;
    try {
      const e = this.router.aborted;
      if (this.closed || e) {
        throw new TandemError(
          'COLL_ABORTED',
          `rank ${this.rank}: the communicator is ${this.closed ? 'closed' : `aborted (${e?.message})`}`,
          {
            hint: 'create a new communicator (with the surviving ranks if one was lost)',
            details: { cause: e?.code },
            cause: e,
          },
        );
      }
      this.router.busy++;
      started = true;
      return await work.apply(this, args);
    } finally {
      if (started) this.router.busy--;
      this.calls--;
    }
  }

  private call(spec: Omit<CallSpec, 'seq' | 'channel'> & { channel?: 0 | 1; seq?: number }): Call {
    this.lastAlgorithm = spec.algorithm === 'none' ? undefined : spec.algorithm;
    return new Call(this, { channel: 0, seq: spec.seq ?? this.seq++, ...spec });
  }

  /** In place: every rank's `data` becomes the reduction over all ranks (op sum by default). */
  allReduce(data: DTypeArray, options: AllReduceOptions = {}): Promise<void> {
    // A small all-reduce on an idle communicator whose board is open runs synchronously to the
    // end (no promise chain, no turn of the event loop), like an MPI call: see boardNow().
    if (this.board && this.calls === 0 && data.byteLength <= BOARD_MAX) {
      const done = this.boardNow(data, options);
      if (done !== undefined) return done;
    }
    return this.serial(this.allReduceNow, data, options);
  }

  /** allReduce(), in its turn. */
  private async allReduceNow(data: DTypeArray, options: AllReduceOptions): Promise<void> {
    const { dtype, reduce, q8, algorithm } = allReduceArgs(data, options, this.size, this.facts);
    const small = this.size > 1 && algorithm === 'mesh' && !q8 && data.byteLength <= BOARD_MAX;
    const board = small ? (this.board === undefined ? await this.openBoard() : this.board) : null;
    if (board) {
      const rest = this.onBoard(board, dtype, reduce, data);
      if (rest) await rest;
    } else {
      const call = this.call({ op: 'all-reduce', dtype, reduce, q8, algorithm, count: data.length, aux: 0 });
      if (this.size > 1) await this.allReduceBy(algorithm, call, data);
    }
    if (reduce === 'mean') divideInPlace(dtype, data, this.size);
  }

  private allReduceBy(algorithm: Algorithm, call: Call, data: DTypeArray): Promise<void> {
    if (algorithm === 'mesh') return allReduceMesh(call, data);
    if (algorithm === 'ring') return allReduceRing(call, data, this.ring);
    if (algorithm === 'rhd') return allReduceRhd(call, data);
    return allReduceTree(call, data, this.tree(0));
  }

  /** An all-reduce by the board: it takes the call's seq, as a Call would, but makes none (Board.allReduce). */
  private onBoard(
    board: Board,
    dtype: DType,
    reduce: ReduceOp | 'mean',
    data: DTypeArray,
  ): Promise<void> | undefined {
    this.lastAlgorithm = 'mesh';
    return board.allReduce(this.seq++, dtype, reduce, data);
  }

  /** The Call an all-reduce by messages makes, for a board call that needs one (Board.call). */
  boardCall(seq: number, dtype: DType, reduce: ReduceOp | 'mean', count: number): Call {
    return this.call({ op: 'all-reduce', dtype, reduce, q8: false, algorithm: 'mesh', count, aux: 0, seq });
  }

  /**
   * The all-reduce by the board, begun at once (the communicator is idle): a settled promise
   * when it finished synchronously (the usual case), the rest's promise (the communicator
   * busy until it settles) when a peer is late, or undefined when the board is not for this
   * call (another algorithm or the q8 wire). What serial() checks and counts, it does here.
   */
  private boardNow(data: DTypeArray, options: AllReduceOptions): Promise<void> | undefined {
    const board = this.board as Board;
    let rest: Promise<void> | undefined;
    this.calls++;
    this.router.busy++;
    try {
      if (this.closed || this.router.aborted) return undefined; // serial() says why
      const { dtype, reduce, q8, algorithm } = allReduceArgs(data, options, this.size, this.facts);
      if (algorithm !== 'mesh' || q8) return undefined;
      rest = this.onBoard(board, dtype, reduce, data);
      if (rest === undefined) {
        if (reduce === 'mean') divideInPlace(dtype, data, this.size);
        return DONE;
      }
      const p = rest
        .then(() => (reduce === 'mean' ? divideInPlace(dtype, data, this.size) : undefined))
        .finally(() => {
          this.router.busy--;
          this.calls--;
        });
      this.last = p;
      return p;
    } catch (e) {
      return Promise.reject(e);
    } finally {
      if (rest === undefined) {
        this.router.busy--;
        this.calls--;
      }
    }
  }

  /** Every rank's `data` ([count]) gathered in rank order into a new [size * count] array (or `out`). */
  allGather(data: DTypeArray, options: CallOptions & { out?: DTypeArray } = {}): Promise<DTypeArray> {
    return this.serial(async () => {
      const dtype = dataDType(data, options);
      const count = data.length;
      checkCount(count * this.size);
      const out = options.out ?? allocate(dtype, count * this.size);
      if (out.length !== count * this.size || out.constructor !== data.constructor)
        throw badArg(
          `all-gather output holds ${out.length} elements, need ${count * this.size}`,
          'pass an out array of size * count elements of the same type',
        );
      out.set(data, this.rank * count);
      let algorithm = pickAlgorithm(this.size, this.facts, 'all-gather', out.byteLength, options, false);
      if (algorithm === 'rhd' && (this.size & (this.size - 1)) !== 0) algorithm = 'ring';
      const call = this.call({
        op: 'all-gather',
        dtype,
        reduce: 'none',
        q8: false,
        algorithm,
        count,
        aux: 0,
      });
      if (this.size > 1) {
        if (algorithm === 'mesh') await allGatherMesh(call, out, count);
        else if (algorithm === 'ring') await allGatherRing(call, out, count, this.ring);
        else if (algorithm === 'rhd') await allGatherRhd(call, out, count);
        else await allGatherTree(call, out, count, this.tree(0));
      }
      return out;
    });
  }

  /**
   * Reduces `data` ([count]) over all ranks and leaves rank r with chunk r of
   * chunkRanges(count, size) (sizes differ by at most one); returns that chunk (a view of
   * `data`). The rest of `data` is scratch afterwards.
   */
  reduceScatter(data: DTypeArray, options: AllReduceOptions = {}): Promise<DTypeArray> {
    return this.serial(async () => {
      const dtype = dataDType(data, options);
      const reduce = options.op ?? 'sum';
      if (!['sum', 'max', 'min', 'mean'].includes(reduce))
        throw badArg(`unknown reduce op '${reduce}'`, 'use sum, max, min or mean');
      if (options.wire === 'q8') throw badArg('q8 wire format is for all-reduce only', 'drop wire: q8');
      checkCount(data.length);
      const own = chunkRanges(data.length, this.size)[this.rank] as Range;
      const algorithm = pickAlgorithm(
        this.size,
        this.facts,
        'reduce-scatter',
        data.byteLength,
        options,
        false,
      );
      const call = this.call({
        op: 'reduce-scatter',
        dtype,
        reduce,
        q8: false,
        algorithm,
        count: data.length,
        aux: 0,
      });
      if (this.size > 1) {
        const pow2 = (this.size & (this.size - 1)) === 0;
        if (algorithm === 'mesh') await reduceScatterMesh(call, data);
        else if (algorithm === 'ring') await reduceScatterRing(call, data, this.ring);
        else if (algorithm === 'rhd' && pow2) await reduceScatterRhd(call, data);
        else if (algorithm === 'rhd') await allReduceRhd(call, data);
        else await allReduceTree(call, data, this.tree(0));
      }
      const mine = sub(data, own);
      if (reduce === 'mean') divideInPlace(dtype, mine, this.size);
      return mine;
    });
  }

  /** In place: `data` of rank `root` is copied into `data` on every rank. */
  broadcast(data: DTypeArray, root: number, options: CallOptions = {}): Promise<void> {
    return this.serial(async () => {
      const dtype = dataDType(data, options);
      checkRoot(root, this.size);
      checkCount(data.length);
      let algorithm = pickAlgorithm(this.size, this.facts, 'broadcast', data.byteLength, options, false);
      if (algorithm === 'rhd') algorithm = 'tree';
      const call = this.call({
        op: 'broadcast',
        dtype,
        reduce: 'none',
        q8: false,
        algorithm,
        count: data.length,
        aux: root,
      });
      if (this.size === 1) return;
      if (algorithm === 'mesh') await broadcastMesh(call, data, root);
      else if (algorithm === 'ring')
        await broadcastRing(
          call,
          data,
          root,
          this.ring,
          Math.max(1024, Math.floor((this.router.fragmentBytes * 4) / bytesPerElement(dtype))),
        );
      else await broadcastTree(call, data, this.tree(root));
    });
  }

  /**
   * All-to-all with per-rank counts: sends sendCounts[j] values (consecutive in `send`, rank
   * order) to rank j; receives recvCounts[j] values from rank j into the returned array (rank
   * order). Without recvCounts, the counts are exchanged first.
   */
  allToAll(
    send: DTypeArray,
    sendCounts: readonly number[],
    recvCounts?: readonly number[],
    options: CallOptions = {},
  ): Promise<DTypeArray> {
    return this.serial(async () => {
      const dtype = dataDType(send, options);
      checkCounts('sendCounts', sendCounts, this.size, send.length);
      let counts = recvCounts;
      if (counts === undefined) {
        const gathered = await this.gatherInts(Int32Array.from(sendCounts), 'all-to-all', 1);
        counts = Array.from({ length: this.size }, (_, j) => gathered[j * this.size + this.rank] as number);
      } else checkCounts('recvCounts', counts, this.size);
      const recv = allocate(
        dtype,
        counts.reduce((a, b) => a + b, 0),
      );
      const call = this.call({
        op: 'all-to-all',
        dtype,
        reduce: 'none',
        q8: false,
        algorithm: 'mesh',
        count: 0,
        aux: 0,
      });
      await allToAllPairwise(call, send, sendCounts, recv, counts);
      return recv;
    });
  }

  /**
   * Every rank's `mine` (the same length everywhere), in rank order: the small tables that
   * all-to-all counts and split keys need before their call (`op` and `aux` keep the two apart).
   */
  private async gatherInts(mine: Int32Array, op: 'all-to-all' | 'split', aux: number): Promise<Int32Array> {
    const out = new Int32Array(mine.length * this.size);
    out.set(mine, this.rank * mine.length);
    const call = this.call({
      op,
      dtype: 'i32',
      reduce: 'none',
      q8: false,
      algorithm: 'mesh',
      count: mine.length,
      aux,
    });
    if (this.size > 1) await allGatherMesh(call, out, mine.length);
    return out;
  }

  /**
   * The board, opened by every rank at the same call (collectively: the regions' addresses
   * are exchanged), or null when one cannot be had: members not all linked directly to each
   * other (decided from the world's routes, which every rank knows alike), or a rank whose
   * fabric refused the regions.
   */
  private async openBoard(): Promise<Board | null> {
    const routes = this.router.routes;
    const direct = this.members.every((a) => this.members.every((b) => a === b || routes[a]?.[b] === b));
    if (!direct) return (this.board = null);
    const regions = Board.allocate(this.router, this.size);
    const table = new Int32Array(4 * this.size);
    table.set(Board.describe(regions), 4 * this.rank);
    const call = this.call({
      op: 'all-gather',
      dtype: 'i32',
      reduce: 'none',
      q8: false,
      algorithm: 'mesh',
      count: 4,
      aux: 2,
    });
    await allGatherMesh(call, table, 4);
    return (this.board = Board.open(this.router, this, this.rank, this.members, regions, table) ?? null);
  }

  /** Point to point: `data` to `peer`; resolves once copied out. The peer calls recv(rank, ...). */
  send(peer: number, data: DTypeArray, options: CallOptions & { tag?: number } = {}): Promise<void> {
    return this.serial(async () => {
      const dtype = dataDType(data, options);
      checkPeer(peer, this.rank, this.size);
      const seq = this.sendSeq.get(peer) ?? 0;
      this.sendSeq.set(peer, seq + 1);
      const call = this.call({
        op: 'send-recv',
        dtype,
        reduce: 'none',
        q8: false,
        algorithm: 'none',
        count: data.length,
        aux: options.tag ?? 0,
        channel: 1,
        seq,
      });
      await call.send(peer, call.encode(data));
    });
  }

  /** Point to point: fills `into` with the next message from `peer` (same count, dtype and tag). */
  recv(peer: number, into: DTypeArray, options: CallOptions & { tag?: number } = {}): Promise<void> {
    return this.serial(async () => {
      const dtype = dataDType(into, options);
      checkPeer(peer, this.rank, this.size);
      const seq = this.recvSeq.get(peer) ?? 0;
      this.recvSeq.set(peer, seq + 1);
      const call = this.call({
        op: 'send-recv',
        dtype,
        reduce: 'none',
        q8: false,
        algorithm: 'none',
        count: into.length,
        aux: options.tag ?? 0,
        channel: 1,
        seq,
      });
      call.copyFrom(into, await call.recv(peer, call.wireBytes(into.length)));
    });
  }

  /** Returns once every rank has entered the barrier (dissemination: ceil(log2 n) rounds). */
  barrier(): Promise<void> {
    return this.serial(() => this.barrierNow());
  }

  private async barrierNow(): Promise<void> {
    const call = this.call({
      op: 'barrier',
      dtype: 'i32',
      reduce: 'none',
      q8: false,
      algorithm: 'mesh',
      count: 0,
      aux: 0,
    });
    const empty = new Uint8Array(0);
    for (let d = 1, step = 0; d < this.size; d *= 2, step++) {
      const sent = call.send((this.rank + d) % this.size, empty, 0, step);
      await call.recv((this.rank - d + this.size) % this.size, 0, 0, step);
      await sent;
    }
  }

  /**
   * Splits into sub-communicators: ranks passing the same `color` form one, ordered by
   * (key, rank); a negative color opts out (returns undefined). Collective over this
   * communicator. Sub-communicators share this one's links (pairs without a link among the
   * members are relayed, possibly through non-members) and its fate: an abort ends both.
   */
  split(color: number, key = this.rank): Promise<Communicator | undefined> {
    return this.serial(async () => {
      if (!Number.isInteger(color) || !Number.isInteger(key))
        throw badArg(`split color ${color} and key ${key} must be integers`, 'pass integers');
      const seq = this.seq;
      const table = await this.gatherInts(Int32Array.of(color, key), 'split', 0);
      if (color < 0) return undefined;
      const ranks = Array.from({ length: this.size }, (_, r) => r)
        .filter((r) => table[2 * r] === color)
        .sort((a, b) => (table[2 * a + 1] as number) - (table[2 * b + 1] as number) || a - b);
      const commId =
        (Math.imul(this.commId ^ 0x9e3779b9, 31) +
          Math.imul(seq + 1, 0x85ebca6b) +
          Math.imul(color + 1, 0xc2b2ae35)) >>>
          0 || 1;
      const members = ranks.map((r) => this.members[r] as number);
      return new Communicator(
        ranks.indexOf(this.rank),
        ranks.length,
        members,
        commId,
        this.router,
        this.timeoutMs,
        inducedGraph(this.graph, ranks),
        undefined,
        this.wires,
      );
    });
  }

  /** Fails every pending and later call on every rank of this world with COLL_ABORTED; returns at once. */
  abort(reason = 'abort() called'): void {
    this.router.abort(
      new TandemError('COLL_ABORTED', `rank ${this.rank} aborted the communicator: ${reason}`, {
        hint: 'create a new communicator',
        details: { rank: this.rank },
      }),
    );
  }

  /**
   * Ends this communicator. On the world communicator: a barrier (bounded, skipped when
   * aborted), then goodbye messages and the connections closed. Sub-communicators just stop.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.board?.close();
    if (this.owned === undefined) {
      this.closed = true;
      return;
    }
    if (!this.router.aborted) await this.barrier().catch(() => undefined);
    this.closed = true;
    await this.router.shutdown(this.timeoutMs);
    const device = this.owned.device;
    if (device) await bounded(device.close(), 2000);
  }
}
