import { TandemError } from '../errors/index.js';
import { copyBytes } from '../kernels/copy.js';
import type { CQ } from './completion-queue.js';
import type { Domain, Region } from './memory.js';
import { randomU32 } from './random.js';
import type { Transport } from './transport.js';
import type {
  CompletionOpcode,
  DeviceStats,
  QpState,
  QueuePair,
  RecvWr,
  SendWr,
  Sge,
  WcStatus,
} from './types.js';
import { Access, MAX_INLINE } from './types.js';
import {
  frameAddrHi,
  frameAddrLo,
  frameFlags,
  frameImm,
  framePlacedLength,
  framePsn,
  frameReadLength,
  frameReservedZero,
  frameRkey,
  frameStatus,
  frameType,
  HeaderWriter,
  PLACED_WRITE_BYTES,
} from './frame-header.js';
import {
  ACK_BYTES,
  ACK_EVERY,
  FLAG_ACKREQ,
  FLAG_IMM,
  FLAG_MORE,
  FLAG_PLACED,
  FrameType,
  MAX_PAYLOAD,
  READ_REQ_BYTES,
  READ_RESP_HEADER,
  SEND_HEADER,
  StatusCode,
  WRITE_HEADER,
  wireStatus,
  type WireStatus,
} from './wire.js';

const MAX_UNEXPECTED_MESSAGES = 65536;
const MAX_UNEXPECTED_BYTES = 512 << 20;
const TWO32 = 4294967296;
const TWO64 = 1n << 64n;
/** Splits a 64-bit address into u32 halves without allocating BigInts (hot path). */
const split = new DataView(new ArrayBuffer(8));
/** Below this many bytes a plain loop copies faster than TypedArray.set. */
const SMALL_COPY = 16;
/**
 * Single-SGE sends and writes up to this size take the no-allocation path (postSmall): a
 * board entry of a 16 KiB all-reduce (head, payload, tail) among them.
 */
const FAST_MAX = 32 * 1024;
/**
 * Consumed entries of `recvs` and `outstanding` are dropped once more than this many lead the
 * array and they are most of it. Kept longer, they outlive young-generation collections and
 * are promoted: with 1024 a 2-rank 8 B all-reduce loop promoted ~1 MB per scavenge and forced
 * an old-space collection (2-20 ms, with concurrent marking threads) every ~15 scavenges.
 */
const COMPACT_AFTER = 32;

/** Copies `len` bytes at `from` of `src` to `at` of `dst`. */
function copyRange(dst: Uint8Array, at: number, src: Uint8Array, from: number, len: number): void {
  if (len > SMALL_COPY) copyBytes(dst, at, src.subarray(from, from + len));
  else for (let i = 0; i < len; i++) dst[at + i] = src[from + i] as number;
}

/** Copies `src` into `dst` at `at`. */
function copyInto(dst: Uint8Array, src: Uint8Array, at: number): void {
  const n = src.length;
  if (n > SMALL_COPY) copyBytes(dst, at, src);
  else for (let i = 0; i < n; i++) dst[at + i] = src[i] as number;
}

/** One frame in flight: a WR is split into frames of at most MAX_PAYLOAD bytes. */
interface Outstanding {
  psn: number;
  group: number;
  wrId: number;
  opcode: SendWr['opcode'];
  last: boolean;
  signaled: boolean;
  byteLen: number;
  /** When the timeout check first saw it pending (0 until then: posting reads no clock). */
  postedAt: number;
  /** READ: where the response lands. */
  targets?: Uint8Array[];
  /** A WRITE the requester placed itself: complete once everything before it is (no ACK needed). */
  placed?: boolean;
}

interface PostedRecv {
  wrId: number;
  targets: Uint8Array[];
  capacity: number;
}

interface Unexpected {
  imm: number | undefined;
  /** Bytes written by the write_imm this entry stands for. */
  immLen: number;
  chunks: Uint8Array[];
  bytes: number;
  complete: boolean;
}

/** Views of `len` bytes starting at byte `from` of the concatenation of `views`. */
function sliceViews(views: readonly Uint8Array[], from: number, len: number): readonly Uint8Array[] {
  if (views.length === 1 && from === 0 && (views[0] as Uint8Array).length === len) return views;
  const out: Uint8Array[] = [];
  for (const v of views) {
    if (len === 0) break;
    if (from >= v.length) {
      from -= v.length;
      continue;
    }
    const take = Math.min(v.length - from, len);
    out.push(v.subarray(from, from + take));
    len -= take;
    from = 0;
  }
  return out;
}

function scatter(targets: readonly Uint8Array[], at: number, data: Uint8Array): void {
  let src = 0;
  for (const t of targets) {
    if (src === data.length) return;
    if (at >= t.length) {
      at -= t.length;
      continue;
    }
    const take = Math.min(t.length - at, data.length - src);
    copyInto(t, src === 0 && take === data.length ? data : data.subarray(src, src + take), at);
    src += take;
    at = 0;
  }
}

/** a comes strictly before b in sequence space (mod 2^32, window 2^31). */
function psnBefore(a: number, b: number): boolean {
  const d = (b - a) >>> 0;
  return d !== 0 && d < 0x80000000;
}

export interface QpOptions {
  pd: Domain;
  cq: CQ;
  recvCq: CQ;
  transport: Transport;
  stats: DeviceStats;
  peerInfo: Record<string, unknown>;
  /** Our first request psn and the peer's (exchanged during setup). */
  sendPsn: number;
  recvPsn: number;
  opTimeoutMs: number;
  onClosed(qp: Qp): void;
}

/**
 * A reliable connected queue pair over a Transport. As requester it numbers frames and
 * matches cumulative ACKs; as responder it validates every one-sided request (key live and
 * in this domain, access flag, bounds) before touching memory. Any protocol violation ends
 * the connection; the first failed request moves the QP to error and flushes the rest.
 */
export class Qp implements QueuePair {
  readonly qpNum = randomU32();
  readonly pd: Domain;
  readonly peerInfo: Record<string, unknown>;
  private readonly cq: CQ;
  private readonly recvCq: CQ;
  private readonly transport: Transport;
  private readonly stats: DeviceStats;
  private readonly opTimeoutMs: number;
  private readonly onClosed: (qp: Qp) => void;
  private qpState: QpState = 'ready';
  private errorStatus: WcStatus = 'flushed';
  private sendPsn: number;
  private expectPsn: number;
  private groupSeq = 0;
  private outstanding: Outstanding[] = [];
  private outHead = 0;
  private recvs: PostedRecv[] = [];
  private recvHead = 0;
  private unexpected: Unexpected[] = [];
  private unexpectedBytes = 0;
  /** The SEND message being received in fragments, if any. */
  private inbound:
    | { recv: PostedRecv | undefined; into: Unexpected | undefined; offset: number; failed: boolean }
    | undefined;
  /** An ACK was asked for (FLAG_ACKREQ): it goes out at the end of this poll (or batch), or with the next post. */
  private ackDue = false;
  /** Requests were received whose ACK was not asked for: it goes out with the next one, or on the timeout tick. */
  private ackLazy = false;
  /** Whether the frame being handled asked for an ACK. */
  private frameAsks = false;
  /** Frames sent since the last one that asked for an ACK. */
  private unasked = 0;
  /** Payload length of the WRITE being received in place (one at a time per connection). */
  private placing = 0;
  private ackPsn = 0;
  /** The last frame completed without its ACK (a placed WRITE); a refusal of it can only fail the QP. */
  private placedPsn: number | undefined;
  private readonly headers = new HeaderWriter();

  constructor(o: QpOptions) {
    this.pd = o.pd;
    this.cq = o.cq;
    this.recvCq = o.recvCq;
    this.transport = o.transport;
    this.stats = o.stats;
    this.peerInfo = o.peerInfo;
    this.sendPsn = o.sendPsn >>> 0;
    this.expectPsn = o.recvPsn >>> 0;
    this.opTimeoutMs = o.opTimeoutMs;
    this.onClosed = o.onClosed;
    o.transport.bind({
      frame: (buf, off, len) => this.onFrame(buf, off, len),
      // event-driven pipes send an asked-for ACK at the end of each batch; polled ones at the end of the poll
      batchEnd: () => {
        if (this.transport.poll === undefined && this.ackDue) this.flushAck();
      },
      closed: (reason, malformed) => this.onTransportClosed(reason, malformed),
      place: (head, bodyLength) => this.place(head, bodyLength),
      placed: (head) => this.onFrame(head, 0, head.length, true),
    });
  }

  get state(): QpState {
    return this.qpState;
  }

  /** Test hook: raw bytes onto this connection's wire. */
  sendRaw(bytes: Uint8Array): void {
    this.transport.sendRaw(bytes);
  }

  /**
   * On polled pipes an asked-for ACK goes out at the end of the poll that received its
   * request (cumulative, one per poll at most). It used to wait for the application's next
   * post or poll, so that a ping-pong reply went first; but a rank whose call had just
   * completed then went to compute without polling again, and a requester waiting on that
   * ACK (a zero-copy send of a 1 MiB all-reduce over tcp) waited the whole compute: with 10 ms
   * of work between calls each call took ~12 ms. Requests that do not ask (FLAG_ACKREQ) cost
   * no ACK at all, so a ping-pong of unsignaled writes is not slowed.
   */
  poll(): boolean {
    const did = this.transport.poll?.() ?? false;
    if (this.ackDue) this.flushAck();
    return did;
  }

  // ---------------------------------------------------------------- requester

  postSend(wr: SendWr): void {
    const t = this.transport;
    if (t.cork === undefined) return this.post(wr);
    // tcp: the request's frames and a due ACK leave in one syscall
    t.cork();
    try {
      this.post(wr);
    } finally {
      t.uncork?.();
    }
  }

  private post(wr: SendWr): void {
    checkSendWr(wr);
    const signaled = wr.signaled !== false;
    if (this.qpState !== 'ready') {
      this.cq.push({
        wrId: wr.wrId,
        status: this.errorStatus,
        opcode: wr.opcode,
        byteLen: 0,
        qpNum: this.qpNum,
      });
      return;
    }
    if (wr.sgl.length === 1 && wr.opcode !== 'read' && this.transport.sendFrom !== undefined) {
      // small single-SGE messages: header and payload go straight to the transport, nothing allocated but the tracking entry
      const sge = wr.sgl[0] as Sge;
      const off = this.resolveOne(sge, false);
      if (off < 0) return this.localFailure(wr.wrId, wr.opcode, 'local_protection');
      if (sge.length <= FAST_MAX)
        return this.postSmall(wr, (this.smr as Region).buffer, off, sge.length, signaled);
    }
    const views = this.resolve(wr.sgl, wr.opcode === 'read');
    if (views === undefined) return this.localFailure(wr.wrId, wr.opcode, 'local_protection');
    let total = 0;
    for (const v of views) total += v.length;
    if (total >= 0x80000000) return this.localFailure(wr.wrId, wr.opcode, 'local_length');
    const group = this.groupSeq++;
    if (wr.opcode === 'send') return this.postSendFrames(wr, views, total, group, signaled);
    const remote = wr.remote as NonNullable<SendWr['remote']>;
    split.setBigUint64(0, remote.addr, true);
    let hi = split.getUint32(4, true);
    let lo = split.getUint32(0, true);
    let off = 0;
    do {
      const len = Math.min(MAX_PAYLOAD, total - off);
      const last = off + len === total;
      const psn = this.nextPsn();
      const entry: Outstanding = {
        psn,
        group,
        wrId: wr.wrId,
        opcode: wr.opcode,
        last,
        signaled,
        byteLen: total,
        postedAt: 0,
      };
      const parts = sliceViews(views, off, len);
      if (wr.opcode === 'read') {
        entry.targets = parts as Uint8Array[];
        this.unasked = 0; // its response acknowledges every earlier request
        this.outstanding.push(entry);
        this.transport.send(this.headers.readRequest(psn, remote.rkey >>> 0, lo, hi, len), []);
      } else {
        const imm = last && wr.opcode === 'write_imm';
        const rkey = remote.rkey >>> 0;
        const direct = this.transport.writeDirect?.(rkey, hi, lo, parts, len) === true;
        const flags = (imm ? FLAG_IMM : 0) | this.asks(signaled && last);
        const immValue = imm ? (wr.imm ?? 0) >>> 0 : 0;
        if (direct)
          this.transport.send(this.headers.placedWrite(flags | FLAG_PLACED, psn, rkey, lo, hi, immValue, len), []);
        else this.transport.send(this.headers.write(flags, psn, rkey, lo, hi, immValue), parts);
        if (!direct) this.outstanding.push(entry);
        else if (this.outHead < this.outstanding.length) this.outstanding.push({ ...entry, placed: true });
        else this.completePlaced(entry);
      }
      off += len;
      if (this.ackDue) this.flushAck();
      // advance the remote address by len, carrying into the high word (may wrap: the responder rejects it)
      const nlo = lo + len;
      lo = nlo >>> 0;
      hi = (hi + Math.floor(nlo / 4294967296)) >>> 0;
    } while (off < total);
  }

  private postSendFrames(
    wr: SendWr,
    views: Uint8Array[],
    total: number,
    group: number,
    signaled: boolean,
  ): void {
    let off = 0;
    do {
      const len = Math.min(MAX_PAYLOAD, total - off);
      const last = off + len === total;
      const psn = this.nextPsn();
      const h = this.headers.send((last ? 0 : FLAG_MORE) | this.asks(signaled && last), psn);
      this.outstanding.push({
        psn,
        group,
        wrId: wr.wrId,
        opcode: 'send',
        last,
        signaled,
        byteLen: total,
        postedAt: 0,
      });
      this.transport.send(h, sliceViews(views, off, len));
      off += len;
    } while (off < total);
    if (this.ackDue) this.flushAck();
  }

  /** One frame of at most FAST_MAX bytes from `len` bytes at `off` of `src` (already validated). */
  private postSmall(wr: SendWr, src: Uint8Array, off: number, len: number, signaled: boolean): void {
    const op = wr.opcode;
    if (op === 'write' && !signaled && this.transport.placeSmall !== undefined) {
      // placed by the requester with no frame: no sequence number, nothing to complete or ACK
      const remote = wr.remote as NonNullable<SendWr['remote']>;
      split.setBigUint64(0, remote.addr, true);
      if (this.transport.placeSmall(remote.rkey >>> 0, split.getUint32(4, true), split.getUint32(0, true), src, off, len)) {
        if (this.ackDue) this.flushAck();
        return;
      }
    }
    const psn = this.nextPsn();
    this.outstanding.push({
      psn,
      group: this.groupSeq++,
      wrId: wr.wrId,
      opcode: op,
      last: true,
      signaled,
      byteLen: len,
      postedAt: 0,
    });
    let h: Uint8Array;
    if (op === 'send') {
      h = this.headers.send(this.asks(signaled), psn);
    } else {
      const remote = wr.remote as NonNullable<SendWr['remote']>;
      split.setBigUint64(0, remote.addr, true);
      const imm = op === 'write_imm';
      const flags = (imm ? FLAG_IMM : 0) | this.asks(signaled);
      const lo = split.getUint32(0, true);
      const hi = split.getUint32(4, true);
      h = this.headers.write(flags, psn, remote.rkey >>> 0, lo, hi, imm ? (wr.imm ?? 0) >>> 0 : 0);
    }
    (this.transport.sendFrom as NonNullable<Transport['sendFrom']>).call(this.transport, h, src, off, len);
    if (this.ackDue) this.flushAck();
  }

  private nextPsn(): number {
    const psn = this.sendPsn;
    this.sendPsn = (psn + 1) >>> 0;
    return psn;
  }

  /** The region resolveOne() found last. */
  private smr: Region | undefined;

  /** Local SGEs to views; undefined when a key is dead, foreign, out of range or not writable. */
  private resolve(sgl: readonly Sge[], mustWrite: boolean): Uint8Array[] | undefined {
    const out: Uint8Array[] = [];
    for (let i = 0; i < sgl.length; i++) {
      const sge = sgl[i] as Sge;
      const off = this.resolveOne(sge, mustWrite);
      if (off < 0) return undefined;
      out.push((this.smr as Region).buffer.subarray(off, off + sge.length));
    }
    return out;
  }

  /** An SGE's offset in its region (left in `smr`), or -1 when the key is dead, foreign, out of range or not writable. */
  private resolveOne(sge: Sge, mustWrite: boolean): number {
    const mr: Region | undefined = this.pd.keys.byLkey.get(sge.lkey);
    if (mr === undefined || mr.pd !== this.pd || !mr.live) return -1;
    if (mustWrite && (mr.access & Access.LOCAL_WRITE) === 0) return -1;
    const a = sge.addr;
    if (typeof a !== 'bigint' || a < 0n || a >= TWO64) return -1;
    split.setBigUint64(0, a, true);
    const off = (split.getUint32(4, true) - mr.addrHi) * TWO32 + (split.getUint32(0, true) - mr.addrLo);
    const len = sge.length;
    if (!(off >= 0) || !Number.isInteger(len) || len < 0 || off + len > mr.length) return -1;
    this.smr = mr;
    return off;
  }

  private localFailure(wrId: number, opcode: CompletionOpcode, status: WcStatus): void {
    this.enterError('flushed', `local ${status} on work request ${wrId}`);
    this.cq.push({ wrId, status, opcode, byteLen: 0, qpNum: this.qpNum });
  }

  postRecv(wr: RecvWr): void {
    if (typeof wr !== 'object' || wr === null || typeof wr.wrId !== 'number' || !Array.isArray(wr.sgl)) {
      throw invalid('postRecv: expected { wrId: number, sgl: Sge[] }');
    }
    if (this.qpState !== 'ready') {
      this.recvCq.push({
        wrId: wr.wrId,
        status: this.errorStatus,
        opcode: 'recv',
        byteLen: 0,
        qpNum: this.qpNum,
      });
      return;
    }
    const targets = wr.sgl.length === 0 ? NO_TARGETS : this.resolve(wr.sgl, true);
    if (targets === undefined) {
      this.recvCq.push({
        wrId: wr.wrId,
        status: 'local_protection',
        opcode: 'recv',
        byteLen: 0,
        qpNum: this.qpNum,
      });
      return;
    }
    let capacity = 0;
    for (const t of targets) capacity += t.length;
    this.recvs.push({ wrId: wr.wrId, targets, capacity });
    this.drainUnexpected();
  }

  /** Matches complete early messages with posted receives, oldest first. */
  private drainUnexpected(): void {
    for (;;) {
      const early = this.unexpected[0];
      if (early === undefined || !early.complete || this.recvHead === this.recvs.length) return;
      const recv = this.shiftRecv();
      this.unexpected.shift();
      this.unexpectedBytes -= early.bytes;
      let at = 0;
      for (const c of early.chunks) {
        if (at + c.length <= recv.capacity) scatter(recv.targets, at, c);
        at += c.length;
      }
      if (early.imm !== undefined) this.completeRecv(recv, 'success', early.immLen, early.imm);
      else
        this.completeRecv(
          recv,
          early.bytes > recv.capacity ? 'local_length' : 'success',
          early.bytes,
          undefined,
        );
    }
  }

  private takeRecv(): PostedRecv | undefined {
    if (this.unexpected.length > 0 || this.recvHead === this.recvs.length) return undefined;
    return this.shiftRecv();
  }

  /**
   * Removes the oldest posted receive. The consumed prefix is dropped when the queue empties
   * or, for a consumer that always keeps receives posted, once it is most of the array (as
   * for `outstanding`), so a long-lived queue pair does not keep every receive it ever had.
   */
  private shiftRecv(): PostedRecv {
    const r = this.recvs[this.recvHead++] as PostedRecv;
    if (this.recvHead === this.recvs.length) {
      this.recvs = [];
      this.recvHead = 0;
    } else if (this.recvHead > COMPACT_AFTER && this.recvHead * 2 > this.recvs.length) {
      this.recvs = this.recvs.slice(this.recvHead);
      this.recvHead = 0;
    }
    return r;
  }

  private completeRecv(r: PostedRecv, status: WcStatus, byteLen: number, imm: number | undefined): void {
    if (imm === undefined)
      this.recvCq.push({ wrId: r.wrId, status, opcode: 'recv', byteLen, qpNum: this.qpNum });
    else this.recvCq.push({ wrId: r.wrId, status, opcode: 'recv_imm', byteLen, imm, qpNum: this.qpNum });
  }

  // ---------------------------------------------------------------- responder

  /** A large WRITE's target, if the header is in order and the request valid (else the normal path judges and counts it). */
  private place(head: Uint8Array, bodyLength: number): Uint8Array | undefined {
    if (
      this.qpState !== 'ready' ||
      !frameReservedZero(head, 0) ||
      frameFlags(head, 0) & ~(FLAG_IMM | FLAG_ACKREQ)
    )
      return undefined;
    if (framePsn(head, 0) !== this.expectPsn) return undefined;
    const len = bodyLength - WRITE_HEADER;
    const mr = this.pd.keys.byRkey.get(frameRkey(head, 0));
    if (mr === undefined || mr.pd !== this.pd || !mr.live || (mr.access & Access.REMOTE_WRITE) === 0)
      return undefined;
    const off = mr.offsetOf(frameAddrHi(head, 0), frameAddrLo(head, 0), len);
    if (off < 0) return undefined;
    this.placing = len;
    return mr.buffer.subarray(off, off + len);
  }

  /**
   * One frame: bytes `[o, o+n)` of `b` (a view of the ring or stream buffer, valid only during
   * the call; parsed in place, no views built on the hot path). `placed`: a WRITE header whose
   * payload the decoder already put in place.
   */
  private onFrame(b: Uint8Array, o: number, n: number, placed = false): void {
    // after an error nothing more is executed, even frames already in the pipe
    if (this.qpState !== 'ready') return;
    const type = frameType(b, o);
    const flags = frameFlags(b, o);
    const psn = framePsn(b, o);
    if (!frameReservedZero(b, o)) return this.malformed('reserved header bytes are not zero');
    if (type === FrameType.ACK || type === FrameType.READ_RESP) return this.onResponse(type, b, o, n, psn);
    if (psn !== this.expectPsn) return this.malformed(`sequence ${psn} where ${this.expectPsn} was expected`);
    this.expectPsn = (psn + 1) >>> 0;
    this.frameAsks = (flags & FLAG_ACKREQ) !== 0;
    if (type === FrameType.SEND) {
      if ((flags & ~(FLAG_MORE | FLAG_ACKREQ)) !== 0) return this.malformed(`SEND flags ${flags}`);
      return this.onSend(b.subarray(o + SEND_HEADER, o + n), (flags & FLAG_MORE) === 0, psn);
    }
    if (type === FrameType.WRITE) {
      if (n < WRITE_HEADER || (flags & ~(FLAG_IMM | FLAG_PLACED | FLAG_ACKREQ)) !== 0)
        return this.malformed('WRITE header truncated or bad flags');
      if ((flags & FLAG_PLACED) !== 0) {
        if (n !== PLACED_WRITE_BYTES || placed) return this.malformed('placed WRITE of the wrong size');
        return this.onPlacedWrite(b, o, (flags & FLAG_IMM) !== 0, psn);
      }
      return this.onWrite(b, o, n, (flags & FLAG_IMM) !== 0, psn, placed);
    }
    if (type === FrameType.READ_REQ) {
      if (n !== READ_REQ_BYTES || flags !== 0) return this.malformed(`READ request of ${n} bytes`);
      return this.onRead(b, o, psn);
    }
    this.malformed(`unknown frame type ${type}`);
  }

  /** The region target() validated last. */
  private tmr: Region | undefined;

  /**
   * Validates a one-sided request: the offset in the region (left in `tmr`), or the refusal
   * status (counted).
   */
  private target(rkey: number, lo: number, hi: number, len: number, flag: number): number | WireStatus {
    const mr = this.pd.keys.byRkey.get(rkey);
    if (mr === undefined || mr.pd !== this.pd || !mr.live) {
      this.stats.rejectedKey++;
      return 'remote_key';
    }
    if ((mr.access & flag) === 0) {
      this.stats.rejectedAccess++;
      return 'remote_access';
    }
    const off = mr.offsetOf(hi, lo, len);
    if (off < 0) {
      this.stats.rejectedBounds++;
      return 'remote_bounds';
    }
    this.tmr = mr;
    return off;
  }

  /**
   * A WRITE the requester already copied into our shared region after validating it against
   * our published key table. We validate again (and count) so that a refusal is never
   * reported as success; the immediate, if any, is delivered as usual.
   */
  private onPlacedWrite(b: Uint8Array, o: number, withImm: boolean, psn: number): void {
    const len = framePlacedLength(b, o);
    const t = this.target(frameRkey(b, o), frameAddrLo(b, o), frameAddrHi(b, o), len, Access.REMOTE_WRITE);
    if (typeof t === 'string') return this.nak(psn, t);
    this.placing = len;
    this.onWrite(b, o, WRITE_HEADER, withImm, psn, true);
  }

  private onWrite(b: Uint8Array, o: number, n: number, withImm: boolean, psn: number, placed: boolean): void {
    if (placed) {
      // validated by place() before the payload landed; only the immediate is left
      if (withImm) {
        const r = this.takeRecv();
        if (r !== undefined) this.completeRecv(r, 'success', this.placing, frameImm(b, o));
        else if (!this.stash(frameImm(b, o), this.placing)) {
          this.stats.rejectedInvalid++;
          return this.nak(psn, 'remote_invalid');
        }
      }
      return this.ack(psn);
    }
    const len = n - WRITE_HEADER;
    const t = this.target(frameRkey(b, o), frameAddrLo(b, o), frameAddrHi(b, o), len, Access.REMOTE_WRITE);
    if (typeof t === 'string') return this.nak(psn, t);
    const dst = (this.tmr as Region).buffer;
    const src = o + WRITE_HEADER;
    if (withImm) {
      const r = this.takeRecv();
      if (r === undefined && !this.stash(frameImm(b, o), len)) {
        this.stats.rejectedInvalid++;
        return this.nak(psn, 'remote_invalid');
      }
      copyRange(dst, t, b, src, len);
      if (r !== undefined) this.completeRecv(r, 'success', len, frameImm(b, o));
    } else {
      copyRange(dst, t, b, src, len);
    }
    this.ack(psn);
  }

  private onRead(b: Uint8Array, o: number, psn: number): void {
    const len = frameReadLength(b, o);
    const t = this.target(frameRkey(b, o), frameAddrLo(b, o), frameAddrHi(b, o), len, Access.REMOTE_READ);
    this.flushAck();
    const h = this.headers.response(FrameType.READ_RESP, psn, typeof t === 'string' ? StatusCode[t] : 0);
    if (typeof t === 'string') this.transport.send(h, NO_PAYLOAD);
    else this.transport.send(h, [(this.tmr as Region).buffer.subarray(t, t + len)]);
  }

  private onSend(payload: Uint8Array, last: boolean, psn: number): void {
    let msg = this.inbound;
    if (msg === undefined) {
      const recv = this.takeRecv();
      msg = { recv, into: undefined, offset: 0, failed: false };
      if (recv === undefined) {
        if (!this.stash(undefined, 0)) {
          this.stats.rejectedInvalid++;
          return this.nak(psn, 'remote_invalid');
        }
        msg.into = this.unexpected[this.unexpected.length - 1];
      }
    }
    if (msg.recv !== undefined) {
      if (msg.offset + payload.length > msg.recv.capacity) msg.failed = true;
      else scatter(msg.recv.targets, msg.offset, payload);
    } else if (msg.into !== undefined) {
      msg.into.chunks.push(payload.slice());
      msg.into.bytes += payload.length;
      this.unexpectedBytes += payload.length;
    }
    msg.offset += payload.length;
    this.inbound = last ? undefined : msg;
    if (!last) return this.ack(psn);
    if (msg.into !== undefined) {
      msg.into.complete = true;
      this.drainUnexpected();
    }
    if (msg.recv !== undefined) {
      this.completeRecv(msg.recv, msg.failed ? 'local_length' : 'success', msg.offset, undefined);
      if (msg.failed) return this.nak(psn, 'remote_invalid');
    }
    this.ack(psn);
  }

  /** Keeps an early message for a later postRecv; false when the backlog is full. */
  private stash(imm: number | undefined, immLen: number): boolean {
    if (this.unexpected.length >= MAX_UNEXPECTED_MESSAGES || this.unexpectedBytes >= MAX_UNEXPECTED_BYTES)
      return false;
    this.unexpected.push({ imm, immLen, chunks: [], bytes: 0, complete: imm !== undefined });
    return true;
  }

  private ack(psn: number): void {
    if (this.frameAsks) this.ackDue = true;
    else this.ackLazy = true;
    this.ackPsn = psn;
  }

  /** The flags a request frame carries for its ACK: FLAG_ACKREQ when `signaled` (its WR's last frame) or every ACK_EVERY-th frame. */
  private asks(signaled: boolean): number {
    if (signaled || ++this.unasked >= ACK_EVERY) {
      this.unasked = 0;
      return FLAG_ACKREQ;
    }
    return 0;
  }

  /** Sends the cumulative ACK of every request handled so far, asked for or not. */
  private flushAck(): void {
    if (!(this.ackDue || this.ackLazy) || this.qpState === 'closed') return;
    this.ackDue = false;
    this.ackLazy = false;
    this.stats.acksSent++;
    this.transport.send(this.headers.response(FrameType.ACK, this.ackPsn, 0), NO_PAYLOAD);
  }

  private nak(psn: number, status: WireStatus): void {
    this.flushAck();
    this.stats.acksSent++;
    this.transport.send(this.headers.response(FrameType.ACK, psn, StatusCode[status]), NO_PAYLOAD);
  }

  // ---------------------------------------------------------------- responses

  private onResponse(type: number, b: Uint8Array, o: number, n: number, psn: number): void {
    const isAck = type === FrameType.ACK;
    if (isAck ? n !== ACK_BYTES : n < READ_RESP_HEADER) return this.malformed('truncated response');
    const code = frameStatus(b, o);
    const status = wireStatus[code];
    if (status === undefined || frameFlags(b, o) !== 0) return this.malformed(`response status ${code}`);
    // everything before psn is done (the responder answers in order)
    while (this.outHead < this.outstanding.length) {
      const e = this.outstanding[this.outHead] as Outstanding;
      if (!psnBefore(e.psn, psn)) break;
      if (e.opcode === 'read') return this.malformed(`ACK ${psn} passed unanswered READ ${e.psn}`);
      this.outHead++;
      this.succeed(e);
    }
    const e = this.outstanding[this.outHead];
    if (e === undefined || e.psn !== psn) {
      if (isAck && status === 'success' && (e === undefined || psnBefore(psn, e.psn))) {
        this.completeHeadPlaced();
        return this.compact();
      }
      if (isAck && status !== 'success' && this.placedPsn !== undefined && !psnBefore(this.placedPsn, psn))
        return this.enterError(status, `peer refused a write after it was placed: ${status}`);
      return this.malformed(`response for sequence ${psn} matches no request`);
    }
    if (isAck === (e.opcode === 'read') && status === 'success')
      return this.malformed(`wrong response type for sequence ${psn}`);
    this.outHead++;
    if (status !== 'success') {
      this.cq.push({ wrId: e.wrId, status, opcode: e.opcode, byteLen: 0, qpNum: this.qpNum });
      this.skipGroup(e.group);
      this.enterError('flushed', `peer refused work request ${e.wrId}: ${status}`);
      return;
    }
    if (!isAck) {
      const data = b.subarray(o + READ_RESP_HEADER, o + n);
      let want = 0;
      for (const t of e.targets ?? []) want += t.length;
      if (data.length !== want) return this.malformed(`READ response of ${data.length} bytes for ${want}`);
      scatter(e.targets ?? [], 0, data);
    }
    this.succeed(e);
    this.completeHeadPlaced();
    this.compact();
  }

  /** Completes the placed WRITEs that now lead the outstanding requests. */
  private completeHeadPlaced(): void {
    while (this.outstanding[this.outHead]?.placed === true)
      this.completePlaced(this.outstanding[this.outHead++] as Outstanding);
  }

  /**
   * A WRITE placed by the requester itself (shm: validated against the responder's published
   * key table and copied into its memory before posting returned) completes without waiting
   * for the responder's ACK, once every earlier request has: as an RDMA NIC's ACK does not wait
   * for the remote CPU. Waiting made a sender idle while its peer computed (a 2-rank 1 MiB
   * all-reduce waited ~90 us per step). The responder still validates and delivers the
   * immediate; should it refuse (its key table changed meanwhile, or no receive and a full
   * backlog for the immediate), the queue pair goes to the error state instead.
   */
  private completePlaced(e: Outstanding): void {
    this.placedPsn = e.psn;
    this.succeed(e);
  }

  private succeed(e: Outstanding): void {
    if (e.last && e.signaled)
      this.cq.push({
        wrId: e.wrId,
        status: 'success',
        opcode: e.opcode,
        byteLen: e.byteLen,
        qpNum: this.qpNum,
      });
  }

  /** Drops the remaining frames of a failed WR so it completes once. */
  private skipGroup(group: number): void {
    while (
      this.outHead < this.outstanding.length &&
      (this.outstanding[this.outHead] as Outstanding).group === group
    )
      this.outHead++;
  }

  private compact(): void {
    if (this.outHead === this.outstanding.length) {
      this.outstanding = [];
      this.outHead = 0;
    } else if (this.outHead > COMPACT_AFTER && this.outHead * 2 > this.outstanding.length) {
      this.outstanding = this.outstanding.slice(this.outHead);
      this.outHead = 0;
    }
  }

  // ---------------------------------------------------------------- failure

  /**
   * Called by the device's timer (every 100 ms): sends the ACK of requests that did not ask
   * for one (so a requester's unsignaled work is acknowledged within a tick), and fails the
   * oldest request once it has been pending for the op timeout, counted from the first tick
   * that saw it (so at most one tick late).
   */
  checkTimeout(now: number): void {
    if (this.ackLazy && this.qpState === 'ready') this.flushAck();
    const e = this.outstanding[this.outHead];
    if (this.qpState !== 'ready' || e === undefined) return;
    if (e.postedAt === 0) {
      e.postedAt = now;
      return;
    }
    if (now - e.postedAt < this.opTimeoutMs) return;
    this.outHead++;
    this.cq.push({ wrId: e.wrId, status: 'timeout', opcode: e.opcode, byteLen: 0, qpNum: this.qpNum });
    this.skipGroup(e.group);
    this.enterError('flushed', `work request ${e.wrId} unanswered for ${this.opTimeoutMs} ms`);
  }

  private malformed(what: string): void {
    this.stats.malformedFrames++;
    this.enterError('peer_lost', `malformed frame from peer: ${what}`);
  }

  private onTransportClosed(reason: string, malformed: boolean): void {
    if (malformed) this.stats.malformedFrames++;
    this.enterError('peer_lost', reason);
  }

  /** Moves to error: every pending request and receive completes with `status`, the pipe closes. */
  private enterError(status: WcStatus, _reason: string): void {
    if (this.qpState !== 'ready') return;
    this.qpState = 'error';
    this.errorStatus = status;
    this.flushAll(status);
    this.transport.close();
    this.onClosed(this);
  }

  private flushAll(status: WcStatus): void {
    let group = -1;
    for (let i = this.outHead; i < this.outstanding.length; i++) {
      const e = this.outstanding[i] as Outstanding;
      if (e.group === group) continue;
      group = e.group;
      this.cq.push({ wrId: e.wrId, status, opcode: e.opcode, byteLen: 0, qpNum: this.qpNum });
    }
    this.outstanding = [];
    this.outHead = 0;
    for (let i = this.recvHead; i < this.recvs.length; i++) {
      const r = this.recvs[i] as PostedRecv;
      this.recvCq.push({ wrId: r.wrId, status, opcode: 'recv', byteLen: 0, qpNum: this.qpNum });
    }
    if (this.inbound?.recv) {
      const r = this.inbound.recv;
      this.recvCq.push({ wrId: r.wrId, status, opcode: 'recv', byteLen: 0, qpNum: this.qpNum });
    }
    this.inbound = undefined;
    this.recvs = [];
    this.recvHead = 0;
  }

  async close(): Promise<void> {
    if (this.qpState === 'closed') return;
    if (this.qpState === 'ready') {
      this.qpState = 'closed';
      this.errorStatus = 'flushed';
      this.flushAll('flushed');
      this.transport.close();
      this.onClosed(this);
    }
    this.qpState = 'closed';
  }
}

const NO_PAYLOAD: readonly Uint8Array[] = [];
/** Targets of a zero-length receive (never written to). */
const NO_TARGETS: Uint8Array[] = [];

function invalid(message: string): TandemError {
  return new TandemError('FABRIC_INVALID_REQUEST', message, {
    hint: 'see src/fabric/types.ts for the work request shapes',
  });
}

function checkSendWr(wr: SendWr): void {
  if (typeof wr !== 'object' || wr === null || typeof wr.wrId !== 'number' || !Array.isArray(wr.sgl)) {
    throw invalid('postSend: expected { wrId: number, opcode, sgl: Sge[] }');
  }
  const op = wr.opcode;
  if (op !== 'send' && op !== 'write' && op !== 'write_imm' && op !== 'read') {
    throw invalid(`postSend: unknown opcode '${String(op)}' (send, write, write_imm, read)`);
  }
  if (
    op !== 'send' &&
    (wr.remote === undefined || typeof wr.remote.addr !== 'bigint' || typeof wr.remote.rkey !== 'number')
  ) {
    throw invalid(`postSend: ${op} needs remote: { addr: bigint, rkey: number }`);
  }
  if (op !== 'send' && (wr.remote!.addr < 0n || wr.remote!.addr >= TWO64)) {
    throw invalid(`postSend: remote address ${wr.remote!.addr} is not a 64-bit address`);
  }
  if (
    op === 'write_imm' &&
    (!Number.isInteger(wr.imm) || (wr.imm as number) < 0 || (wr.imm as number) > 0xffffffff)
  ) {
    throw invalid(`postSend: write_imm needs imm in 0..2^32-1, got ${String(wr.imm)}`);
  }
  if (wr.inline === true) {
    if (op === 'read')
      throw invalid('postSend: a read cannot be inline (inline is for send, write and write_imm)');
    let total = 0;
    for (const sge of wr.sgl) total += sge.length;
    if (total > MAX_INLINE)
      throw invalid(
        `postSend: an inline payload of ${total} bytes is over MAX_INLINE (${MAX_INLINE}); post it without inline`,
      );
  }
}
