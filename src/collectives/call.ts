import { TandemError } from '../errors/index.js';
import {
  bytesOf,
  bytesPerElement,
  dtypeCodes,
  viewAs,
  type DType,
  type DTypeArray,
} from '../kernels/dtype.js';
import { q8Bytes, q8Pack, q8Unpack, q8UnpackAdd } from '../kernels/q8.js';
import { copyBytes } from '../kernels/copy.js';
import type { ReduceOp } from '../kernels/reduce.js';
import { reduceFast as reduceInto } from '../kernels/reduce-native.js';
import type { Range } from './chunks.js';
import type { PairwiseStep } from './schedules.js';
import {
  AlgorithmCode,
  describeCall,
  MessageKind,
  OpCode,
  ReduceCode,
  type CollectiveOp,
  type Header,
} from './header.js';
import { SENT, type Message, type Router, type Settled, type Sink } from './router/index.js';

export type Algorithm = 'mesh' | 'ring' | 'rhd' | 'tree';
export const algorithms: readonly Algorithm[] = ['mesh', 'ring', 'rhd', 'tree'];

/** How long Call.drive polls for one send or receive before it leaves the wait to the pump. */
const DRIVE_MS = 1;

/**
 * Mesh parts up to this size are taken whole (Call.takeAll); larger ones stream into their
 * destination (Call.driveAll). Either way the caller drives progress itself while it waits,
 * instead of handing over to the pump through the event loop. Taking a part whole is the
 * faster of the two for small parts and about even with streaming at twice this size, so the
 * limit sits below that; streamed parts stay fast because the caller drives them itself
 * (docs/collectives.md, "Measured facts behind the constants").
 */
export const WHOLE_MAX = 16 * 1024;

/** What the algorithms need to know about the communicator they run on. */
export interface CommCore {
  readonly rank: number;
  readonly size: number;
  /** World rank of every communicator rank. */
  readonly members: readonly number[];
  readonly commId: number;
  readonly router: Router;
  readonly timeoutMs: number;
  /** Connections per linked pair that ring lanes stripe over. */
  readonly wires: number;
  /**
   * Scratch array `slot` (0, 1, ...) of `count` elements, valid until the next call on this
   * communicator (contents undefined); different slots never overlap.
   */
  scratch(dtype: DType, count: number, slot?: number): DTypeArray;
}

export interface CallSpec {
  op: CollectiveOp;
  dtype: DType;
  reduce: ReduceOp | 'mean' | 'none';
  q8: boolean;
  algorithm: Algorithm | 'none';
  count: number;
  seq: number;
  aux: number;
  channel: 0 | 1;
}

/**
 * One collective call in progress: sends and receives carry the call's header, and every
 * received header is checked against this call, so ranks that disagree fail with
 * COLL_MISMATCH (and abort the world) instead of hanging or mixing data.
 */
export class Call {
  private readonly template: Header;
  /** This call's sends and receives still in progress, with the flags the router sets as they settle. */
  private pending: WeakMap<Promise<unknown>, Settled> | undefined;
  readonly op: ReduceOp;

  constructor(
    readonly comm: CommCore,
    readonly spec: CallSpec,
  ) {
    this.op = spec.reduce === 'mean' || spec.reduce === 'none' ? 'sum' : spec.reduce;
    this.template = {
      kind: MessageKind.data,
      op: OpCode[spec.op],
      dtype: dtypeCodes[spec.dtype],
      reduce: ReduceCode[spec.reduce] | (spec.q8 ? 0x10 : 0),
      algorithm: AlgorithmCode[spec.algorithm],
      lane: 0,
      step: 0,
      commId: comm.commId,
      seq: spec.seq >>> 0, // the wire field is 32 bits
      count: spec.count,
      src: comm.members[comm.rank] as number,
      dst: 0,
      totalBytes: 0,
      fragOffset: 0,
      credits: 0,
      aux: spec.aux,
      channel: spec.channel,
    };
  }

  get rank(): number {
    return this.comm.rank;
  }

  get size(): number {
    return this.comm.size;
  }

  /** Resolves once `payload` is copied out; a failure is also seen by whoever awaits later. */
  send(peer: number, payload: Uint8Array, lane = 0, step = 0): Promise<void> {
    const flag: Settled = { settled: false };
    const p = this.comm.router.send(
      { ...this.template, dst: this.comm.members[peer] as number, lane, step },
      payload,
      flag,
    );
    if (p === SENT) return p;
    p.catch(() => undefined); // the caller may be busy awaiting a receive when the world aborts
    return this.track(p, flag);
  }

  /**
   * `p` (a send or receive of this call), once this rank has driven progress itself until
   * it settled, for up to `budgetMs`: a wait handed to the pump costs a turn of the event
   * loop per completion (2 ranks over shm, 1 MiB ring all-reduce: see docs/collectives.md).
   */
  drive<T>(p: Promise<T>, budgetMs = DRIVE_MS): Promise<T> {
    const flag = this.pending?.get(p);
    if (flag !== undefined && !flag.settled) this.comm.router.spinUntil(() => flag.settled, budgetMs);
    return p;
  }

  /** Every promise of `ps`, in order, each driven as by drive(); fails with the first failure in that order. */
  async driveAll(ps: readonly Promise<unknown>[]): Promise<void> {
    for (const p of ps) p.catch(() => undefined); // one failing while an earlier one is awaited is seen in its turn
    for (const p of ps) await this.drive(p);
  }

  private track<T>(p: Promise<T>, flag: Settled): Promise<T> {
    if (!flag.settled) (this.pending ??= new WeakMap()).set(p, flag);
    return p;
  }

  /** Small calls: drives progress synchronously until every other rank has sent (bounded). */
  private spinForAll(budgetMs = 0.2): boolean {
    return this.comm.router.spinFor(this.comm.commId, this.spec.channel, this.comm.members, budgetMs);
  }

  /** The header this call's messages carry (its data fields; the routing fields vary per message). */
  get header(): Readonly<Header> {
    return this.template;
  }

  /**
   * COLL_MISMATCH, with the world aborted, when what `peer` sent (`h`, for a message of
   * `bytes` at `step`) does not belong to this call; else undefined.
   */
  verify(h: Header, peer: number, bytes: number, step = 0): TandemError | undefined {
    const e = this.mismatch(h, peer, bytes, step);
    if (e) this.comm.router.abort(e);
    return e;
  }

  /** COLL_MISMATCH when a header from `peer` does not belong to this call at this step. */
  private mismatch(h: Header, peer: number, bytes: number, step: number): TandemError | undefined {
    const t = this.template;
    const same =
      h.op === t.op &&
      h.dtype === t.dtype &&
      h.reduce === t.reduce &&
      h.algorithm === t.algorithm &&
      h.count === t.count &&
      h.seq === t.seq &&
      h.aux === t.aux;
    if (same && h.step === step && h.totalBytes === bytes) return undefined;
    const mine = describeCall(t);
    const theirs = describeCall(h);
    const why = same
      ? h.step !== step
        ? `step ${h.step} where step ${step} was expected`
        : `${h.totalBytes} bytes where ${bytes} were expected`
      : theirs;
    return new TandemError('COLL_MISMATCH', `rank ${this.rank} called ${mine} but rank ${peer} sent ${why}`, {
      hint: 'every rank must make the same collective calls in the same order, with the same count, dtype, op, root and algorithm',
      details: { rank: this.rank, peer, mine, theirs },
    });
  }

  private wait(
    peer: number,
    bytes: number,
    lane: number,
    step: number,
    flag: Settled,
    sink?: Sink,
  ): Promise<Message> {
    const src = this.comm.members[peer] as number;
    const check: Sink['check'] = (h) => this.mismatch(h, peer, bytes, step);
    const s: Sink | undefined = sink ? { check, consume: sink.consume } : undefined;
    return this.comm.router.recv(
      this.comm.commId,
      this.spec.channel,
      src,
      lane,
      this.comm.timeoutMs,
      () => describeCall(this.template),
      s,
      flag,
    );
  }

  /** The next message of this call from `peer`, whole; `bytes` is the payload length the schedule expects. */
  recv(peer: number, bytes: number, lane = 0, step = 0): Promise<Uint8Array> {
    const flag: Settled = { settled: false };
    return this.track(this.recvWhole(peer, bytes, lane, step, flag), flag);
  }

  private async recvWhole(
    peer: number,
    bytes: number,
    lane: number,
    step: number,
    flag: Settled,
  ): Promise<Uint8Array> {
    const m = await this.wait(peer, bytes, lane, step, flag);
    const e = this.mismatch(m.header, peer, bytes, step);
    if (e) {
      this.comm.router.abort(e);
      throw e;
    }
    return m.payload;
  }

  /** The next message of this call from `peer` if it is already here whole (see spinForAll), else undefined. */
  private take(peer: number, bytes: number, lane = 0, step = 0): Uint8Array | undefined {
    const m = this.comm.router.take(
      this.comm.commId,
      this.spec.channel,
      this.comm.members[peer] as number,
      lane,
    );
    if (m === undefined) return undefined;
    const e = this.mismatch(m.header, peer, bytes, step);
    if (e) {
      this.comm.router.abort(e);
      throw e;
    }
    return m.payload;
  }

  /**
   * Small calls: one whole message from each step's `from` rank (`bytes` long, or
   * `bytes[from]`), put in `into[from]`. Polls first until every other rank's message is in
   * (spinForAll), so they are usually all taken at once: then it returns undefined, without
   * a promise; else a promise for the rest. release() each payload when done with it.
   */
  takeAll(
    steps: readonly PairwiseStep[],
    bytes: number | readonly number[],
    into: (Uint8Array | undefined)[],
  ): Promise<void> | undefined {
    this.spinForAll();
    for (let i = 0; i < steps.length; i++) {
      const peer = (steps[i] as PairwiseStep).from;
      const payload = this.take(peer, typeof bytes === 'number' ? bytes : (bytes[peer] as number));
      if (payload === undefined) return this.takeRest(steps, i, bytes, into);
      into[peer] = payload;
    }
    return undefined;
  }

  private async takeRest(
    steps: readonly PairwiseStep[],
    first: number,
    bytes: number | readonly number[],
    into: (Uint8Array | undefined)[],
  ): Promise<void> {
    for (let i = first; i < steps.length; i++) {
      const peer = (steps[i] as PairwiseStep).from;
      const n = typeof bytes === 'number' ? bytes : (bytes[peer] as number);
      into[peer] = this.take(peer, n) ?? (await this.recv(peer, n));
    }
  }

  /** Hands back a payload from take/recv that nothing refers to any more (its buffer is reused). */
  release(payload: Uint8Array): void {
    this.comm.router.release(payload);
  }

  /** acc = acc (op) the values `peer` sends, reduced fragment by fragment as they arrive. */
  recvReduce(peer: number, acc: DTypeArray, lane = 0, step = 0): Promise<void> {
    const flag: Settled = { settled: false };
    return this.track(this.recvReduceInto(peer, acc, lane, step, flag), flag);
  }

  private async recvReduceInto(
    peer: number,
    acc: DTypeArray,
    lane: number,
    step: number,
    flag: Settled,
  ): Promise<void> {
    const bytes = this.wireBytes(acc.length);
    if (this.spec.q8) return this.reduceFrom(acc, await this.recvWhole(peer, bytes, lane, step, flag));
    const dtype = this.spec.dtype;
    const bpe = bytesPerElement(dtype);
    const consume = (f: Uint8Array, off: number): void => {
      const at = off / bpe;
      const aligned = f.byteOffset % bpe === 0 ? f : f.slice(); // slots are aligned; this is a guard
      reduceInto(this.op, dtype, acc.subarray(at, at + f.byteLength / bpe), viewAs(dtype, aligned));
    };
    await this.wait(peer, bytes, lane, step, flag, { check: () => undefined, consume });
  }

  /** dst = the values `peer` sends, copied fragment by fragment as they arrive. */
  recvCopy(peer: number, dst: DTypeArray, lane = 0, step = 0): Promise<void> {
    const flag: Settled = { settled: false };
    return this.track(this.recvCopyInto(peer, dst, lane, step, flag), flag);
  }

  private async recvCopyInto(
    peer: number,
    dst: DTypeArray,
    lane: number,
    step: number,
    flag: Settled,
  ): Promise<void> {
    const bytes = this.wireBytes(dst.length);
    if (this.spec.q8) return this.copyFrom(dst, await this.recvWhole(peer, bytes, lane, step, flag));
    const target = bytesOf(dst);
    await this.wait(peer, bytes, lane, step, flag, {
      check: () => undefined,
      consume: (f, off) => copyBytes(target, off, f),
    });
  }

  /** Wire bytes for `n` values of this call (q8 or raw). */
  wireBytes(n: number): number {
    return this.spec.q8 ? q8Bytes(n) : n * bytesPerElement(this.spec.dtype);
  }

  /** The wire form of `values` (a view of them, or a q8 packing). */
  encode(values: DTypeArray): Uint8Array {
    if (!this.spec.q8) return bytesOf(values);
    const out = new Uint8Array(q8Bytes(values.length));
    q8Pack(values as Float32Array, out);
    return out;
  }

  /** acc = acc (op) received values. */
  reduceFrom(acc: DTypeArray, payload: Uint8Array): void {
    if (this.spec.q8) q8UnpackAdd(payload, acc as Float32Array);
    else reduceInto(this.op, this.spec.dtype, acc, viewAs(this.spec.dtype, payload));
  }

  /** dst = received values. */
  copyFrom(dst: DTypeArray, payload: Uint8Array): void {
    if (this.spec.q8) q8Unpack(payload, dst as Float32Array);
    else dst.set(viewAs(this.spec.dtype, payload));
  }

  /** With q8, replaces `values` by what receivers will decode, so every rank ends identical. */
  settle(values: DTypeArray): Uint8Array {
    const wire = this.encode(values);
    if (this.spec.q8) q8Unpack(wire, values as Float32Array);
    return wire;
  }
}

export function sub(a: DTypeArray, r: Range): DTypeArray {
  return a.subarray(r.offset, r.offset + r.count);
}

/** The union range of chunks [lo, hi) (chunks are contiguous and in order). */
export function span(chunks: readonly Range[], lo: number, hi: number): Range {
  const first = chunks[lo] as Range;
  const last = chunks[hi - 1] as Range;
  return { offset: first.offset, count: last.offset + last.count - first.offset };
}
