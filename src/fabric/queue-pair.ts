import { AddressSplit } from './address-split.js';
import type { CQ } from './completion-queue.js';
import { noteFailure } from './completions.js';
import {
  frameFlags,
  framePsn,
  frameReservedZero,
  frameStatus,
  frameType,
  HeaderWriter,
} from './frame-header.js';
import type { Domain, Region } from './memory.js';
import { OutstandingFrames, psnBefore, type OutstandingFrame } from './outstanding.js';
import { randomU32 } from './random.js';
import { ReceiveQueue, type PostedRecv } from './receive-queue.js';
import { Responder, type ResponderHost } from './qp-responder.js';
import { RegionCheck } from './region-check.js';
import { scatter, sliceViews } from './sgl-views.js';
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
  WorkCompletion,
} from './types.js';
import {
  ACK_BYTES,
  ACK_EVERY,
  FLAG_ACKREQ,
  FLAG_IMM,
  FLAG_MORE,
  FLAG_PLACED,
  FrameType,
  MAX_PAYLOAD,
  READ_RESP_HEADER,
  wireStatus,
} from './wire.js';
import { checkRecvWr, checkSendWr } from './work-request-check.js';

/** Splits a 64-bit address into u32 halves without allocating BigInts (hot path). */
const split = new AddressSplit();
/**
 * Single-SGE sends and writes up to this size take the no-allocation path (postSmall): a
 * board entry of a 16 KiB all-reduce (head, payload, tail) among them.
 */
const FAST_MAX = 32 * 1024;
/** Targets of a zero-length receive (never written to). */
const NO_TARGETS: Uint8Array[] = [];

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
 * matches cumulative ACKs (outstanding.ts); as responder it validates every one-sided request
 * (key live and in this domain, access flag, bounds: region-check.ts) before touching memory,
 * and matches SENDs with posted receives (receive-queue.ts). Any protocol violation ends the
 * connection; the first failed request moves the QP to error and flushes the rest, each
 * failed completion carrying the reason (completionError shows it).
 */
export class Qp implements QueuePair, ResponderHost {
  readonly qpNum = randomU32();
  readonly pd: Domain;
  readonly peerInfo: Record<string, unknown>;
  private readonly cq: CQ;
  private readonly transport: Transport;
  private readonly stats: DeviceStats;
  private readonly opTimeoutMs: number;
  private readonly onClosed: (qp: Qp) => void;
  private readonly receives: ReceiveQueue;
  private readonly inFlight = new OutstandingFrames();
  private readonly regions: RegionCheck;
  private readonly responder: Responder;
  private readonly headers = new HeaderWriter();
  private qpState: QpState = 'ready';
  private errorStatus: WcStatus = 'flushed';
  /** Why the queue pair left 'ready' (given to every failed completion from then on). */
  private reason = '';
  private sendPsn: number;
  private groupSeq = 0;
  /** Frames sent since the last one that asked for an ACK. */
  private unasked = 0;
  /** The last frame completed without its ACK (a placed WRITE); a refusal of it can only fail the QP. */
  private placedPsn: number | undefined;

  constructor(o: QpOptions) {
    this.pd = o.pd;
    this.cq = o.cq;
    this.transport = o.transport;
    this.stats = o.stats;
    this.peerInfo = o.peerInfo;
    this.sendPsn = o.sendPsn >>> 0;
    this.opTimeoutMs = o.opTimeoutMs;
    this.onClosed = o.onClosed;
    this.receives = new ReceiveQueue(o.recvCq, o.stats, this.qpNum);
    this.regions = new RegionCheck(o.pd, o.stats);
    this.responder = new Responder(this, o.transport, this.regions, this.receives, o.stats, o.recvPsn);
    o.transport.bind({
      frame: (buf, off, len) => this.onFrame(buf, off, len),
      write: (flags, psn, rkey, lo, hi, imm, buf, off, len) => {
        // after an error nothing more is executed, even frames already in the pipe
        if (this.qpState === 'ready')
          this.responder.onWriteFields(flags, psn, rkey, lo, hi, imm, buf, off, len);
      },
      // event-driven pipes send an asked-for ACK at the end of each batch; polled ones at the end of the poll
      batchEnd: () => {
        if (this.transport.poll === undefined) this.responder.flushIfDue();
      },
      closed: (reason, malformed) => this.onTransportClosed(reason, malformed),
      place: (head, bodyLength) => this.responder.place(head, bodyLength),
      placed: (head) => this.onFrame(head, 0, head.length, true),
    });
  }

  get state(): QpState {
    return this.qpState;
  }

  /** Why the queue pair is in error or closed ('' while ready). */
  get errorReason(): string {
    return this.reason;
  }

  /** Test hook: the posted receives not yet consumed are among these (the conformance suite bounds them). */
  private get recvs(): readonly PostedRecv[] {
    return this.receives.posted;
  }

  /** Test hook: the requester's frames in flight are `outstanding` from `outHead` on (the conformance suite checks they drain). */
  private get outstanding(): readonly OutstandingFrame[] {
    return this.inFlight.items;
  }

  private get outHead(): number {
    return this.inFlight.first;
  }

  /** Test hook: raw bytes onto this connection's wire. */
  sendRaw(bytes: Uint8Array): void {
    this.transport.sendRaw(bytes);
  }

  /**
   * On polled pipes an asked-for ACK goes out at the end of the poll that received its
   * request (cumulative, one per poll at most), not with the application's next post or poll:
   * a rank whose call has just completed may go to compute without polling again, and a
   * requester waiting on that ACK (a zero-copy send) would wait the whole computation
   * (docs/fabric.md). Requests that do not ask (FLAG_ACKREQ) cost no ACK at all, so a
   * ping-pong of unsignaled writes is not slowed.
   */
  poll(): boolean {
    const did = this.transport.poll?.() ?? false;
    this.responder.flushIfDue();
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
    if (this.qpState !== 'ready') return this.fail(this.cq, wr.wrId, this.errorStatus, wr.opcode);
    if (wr.sgl.length === 1 && wr.opcode !== 'read' && this.transport.sendFrom !== undefined) {
      // small single-SGE messages: header and payload go straight to the transport, nothing allocated but the tracking entry
      const sge = wr.sgl[0] as Sge;
      const off = this.regions.local(sge, false);
      if (off < 0) return this.localFailure(wr.wrId, wr.opcode, 'local_protection');
      if (sge.length <= FAST_MAX)
        return this.postSmall(wr, (this.regions.localRegion as Region).buffer, off, sge.length, signaled);
    }
    const views = this.regions.localViews(wr.sgl, wr.opcode === 'read');
    if (views === undefined) return this.localFailure(wr.wrId, wr.opcode, 'local_protection');
    let total = 0;
    for (const v of views) total += v.length;
    if (total >= 0x80000000) return this.localFailure(wr.wrId, wr.opcode, 'local_length');
    const group = this.groupSeq++;
    if (wr.opcode === 'send') return this.postSendFrames(wr, views, total, group, signaled);
    this.postOneSided(wr, views, total, group, signaled);
  }

  /** A WRITE, write_imm or READ of `total` bytes from `views`, in frames of at most MAX_PAYLOAD. */
  private postOneSided(
    wr: SendWr,
    views: Uint8Array[],
    total: number,
    group: number,
    signaled: boolean,
  ): void {
    const remote = wr.remote as NonNullable<SendWr['remote']>;
    const rkey = remote.rkey >>> 0;
    split.split(remote.addr);
    let hi = split.hi;
    let lo = split.lo;
    let off = 0;
    do {
      const len = Math.min(MAX_PAYLOAD, total - off);
      const last = off + len === total;
      const psn = this.nextPsn();
      const entry: OutstandingFrame = {
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
        this.inFlight.push(entry);
        this.transport.send(this.headers.readRequest(psn, rkey, lo, hi, len), []);
      } else {
        const imm = last && wr.opcode === 'write_imm' ? (wr.imm ?? 0) >>> 0 : 0;
        const direct = this.transport.writeDirect?.(rkey, hi, lo, parts, len) === true;
        const flags = (last && wr.opcode === 'write_imm' ? FLAG_IMM : 0) | this.asks(signaled && last);
        if (direct) {
          this.transport.send(this.headers.placedWrite(flags | FLAG_PLACED, psn, rkey, lo, hi, imm, len), []);
          if (!this.inFlight.empty) this.inFlight.push({ ...entry, placed: true });
          else this.completePlaced(entry);
        } else {
          this.transport.send(this.headers.write(flags, psn, rkey, lo, hi, imm), parts);
          this.inFlight.push(entry);
        }
      }
      off += len;
      this.responder.flushIfDue();
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
      this.inFlight.push({
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
    this.responder.flushIfDue();
  }

  /** One frame of at most FAST_MAX bytes from `len` bytes at `off` of `src` (already validated). */
  private postSmall(wr: SendWr, src: Uint8Array, off: number, len: number, signaled: boolean): void {
    const op = wr.opcode;
    if (op === 'write' && !signaled && this.transport.placeSmall !== undefined) {
      // placed by the requester with no frame: no sequence number, nothing to complete or ACK
      const remote = wr.remote as NonNullable<SendWr['remote']>;
      split.split(remote.addr);
      if (this.transport.placeSmall(remote.rkey >>> 0, split.hi, split.lo, src, off, len)) {
        this.responder.flushIfDue();
        return;
      }
    }
    const psn = this.nextPsn();
    this.inFlight.push({
      psn,
      group: this.groupSeq++,
      wrId: wr.wrId,
      opcode: op,
      last: true,
      signaled,
      byteLen: len,
      postedAt: 0,
    });
    const t = this.transport;
    if (op === 'send') {
      const h = this.headers.send(this.asks(signaled), psn);
      (t.sendFrom as NonNullable<Transport['sendFrom']>).call(t, h, src, off, len);
    } else {
      const remote = wr.remote as NonNullable<SendWr['remote']>;
      split.split(remote.addr);
      const withImm = op === 'write_imm';
      const flags = (withImm ? FLAG_IMM : 0) | this.asks(signaled);
      const imm = withImm ? (wr.imm ?? 0) >>> 0 : 0;
      const rkey = remote.rkey >>> 0;
      if (t.sendWrite !== undefined) t.sendWrite(flags, psn, rkey, split.lo, split.hi, imm, src, off, len);
      else
        (t.sendFrom as NonNullable<Transport['sendFrom']>).call(
          t,
          this.headers.write(flags, psn, rkey, split.lo, split.hi, imm),
          src,
          off,
          len,
        );
    }
    this.responder.flushIfDue();
  }

  private nextPsn(): number {
    const psn = this.sendPsn;
    this.sendPsn = (psn + 1) >>> 0;
    return psn;
  }

  private localFailure(wrId: number, opcode: CompletionOpcode, status: WcStatus): void {
    this.enterError('flushed', `local ${status} on work request ${wrId}`);
    this.fail(this.cq, wrId, status, opcode);
  }

  postRecv(wr: RecvWr): void {
    checkRecvWr(wr);
    if (this.qpState !== 'ready') return this.receives.fail(wr.wrId, this.errorStatus, this.reason);
    const targets = wr.sgl.length === 0 ? NO_TARGETS : this.regions.localViews(wr.sgl, true);
    if (targets === undefined) return this.receives.fail(wr.wrId, 'local_protection', undefined);
    this.receives.post(wr.wrId, targets);
  }

  // ---------------------------------------------------------------- responder

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
    this.responder.onRequest(b, o, n, type, flags, psn, placed);
  }

  /** The flags a request frame carries for its ACK: FLAG_ACKREQ when `signaled` (its WR's last frame) or every ACK_EVERY-th frame. */
  private asks(signaled: boolean): number {
    if (signaled || ++this.unasked >= ACK_EVERY) {
      this.unasked = 0;
      return FLAG_ACKREQ;
    }
    return 0;
  }

  // ---------------------------------------------------------------- responses

  private onResponse(type: number, b: Uint8Array, o: number, n: number, psn: number): void {
    const isAck = type === FrameType.ACK;
    if (isAck ? n !== ACK_BYTES : n < READ_RESP_HEADER) return this.malformed('truncated response');
    const code = frameStatus(b, o);
    const status = wireStatus[code];
    if (status === undefined || frameFlags(b, o) !== 0) return this.malformed(`response status ${code}`);
    // everything before psn is done (the responder answers in order)
    for (let e = this.inFlight.peek(); e !== undefined && psnBefore(e.psn, psn); e = this.inFlight.peek()) {
      if (e.opcode === 'read') return this.malformed(`ACK ${psn} passed unanswered READ ${e.psn}`);
      this.inFlight.shift();
      this.succeed(e);
    }
    const e = this.inFlight.peek();
    if (e === undefined || e.psn !== psn) {
      if (isAck && status === 'success' && (e === undefined || psnBefore(psn, e.psn))) {
        this.completeHeadPlaced();
        return this.inFlight.compact();
      }
      if (isAck && status !== 'success' && this.placedPsn !== undefined && !psnBefore(this.placedPsn, psn))
        return this.enterError(status, `peer refused a write after it was placed: ${status}`);
      return this.malformed(`response for sequence ${psn} matches no request`);
    }
    if (isAck === (e.opcode === 'read') && status === 'success')
      return this.malformed(`wrong response type for sequence ${psn}`);
    this.inFlight.shift();
    if (status !== 'success')
      return this.failRequest(e, status, `peer refused work request ${e.wrId}: ${status}`);
    if (!isAck) {
      const data = b.subarray(o + READ_RESP_HEADER, o + n);
      let want = 0;
      for (const t of e.targets ?? []) want += t.length;
      if (data.length !== want) return this.malformed(`READ response of ${data.length} bytes for ${want}`);
      scatter(e.targets ?? [], 0, data);
    }
    this.succeed(e);
    this.completeHeadPlaced();
    this.inFlight.compact();
  }

  /** Completes the placed WRITEs that now lead the outstanding requests. */
  private completeHeadPlaced(): void {
    while (this.inFlight.peek()?.placed === true) this.completePlaced(this.inFlight.shift());
  }

  /**
   * A WRITE placed by the requester itself (shm: validated against the responder's published
   * key table and copied into its memory before posting returned) completes without waiting
   * for the responder's ACK, once every earlier request has: as an RDMA NIC's ACK does not wait
   * for the remote CPU, and a sender need not idle while its peer computes. The responder
   * still validates and delivers the immediate; should it refuse (its key table changed
   * meanwhile, or no receive and a full backlog for the immediate), the queue pair goes to the
   * error state instead.
   */
  private completePlaced(e: OutstandingFrame): void {
    this.placedPsn = e.psn;
    this.succeed(e);
  }

  private succeed(e: OutstandingFrame): void {
    if (e.last && e.signaled)
      this.cq.push({
        wrId: e.wrId,
        status: 'success',
        opcode: e.opcode,
        byteLen: e.byteLen,
        qpNum: this.qpNum,
      });
  }

  // ---------------------------------------------------------------- failure

  /**
   * Called by the device's timer (every 100 ms): sends the ACK of requests that did not ask
   * for one (so a requester's unsignaled work is acknowledged within a tick), and fails the
   * oldest request once it has been pending for the op timeout, counted from the first tick
   * that saw it (so at most one tick late).
   */
  checkTimeout(now: number): void {
    this.responder.flushIfLazy();
    const e = this.inFlight.peek();
    if (this.qpState !== 'ready' || e === undefined) return;
    if (e.postedAt === 0) {
      e.postedAt = now;
      return;
    }
    if (now - e.postedAt < this.opTimeoutMs) return;
    this.inFlight.shift();
    this.failRequest(e, 'timeout', `work request ${e.wrId} unanswered for ${this.opTimeoutMs} ms`);
  }

  /** The request of `e` failed with `status`: it completes once, then the queue pair goes to error for `reason`. */
  private failRequest(e: OutstandingFrame, status: WcStatus, reason: string): void {
    const wc: WorkCompletion = { wrId: e.wrId, status, opcode: e.opcode, byteLen: 0, qpNum: this.qpNum };
    noteFailure(wc, reason);
    this.cq.push(wc);
    this.inFlight.skipGroup(e.group);
    this.enterError('flushed', reason);
  }

  /** A failed completion without data on `cq`, carrying the queue pair's error reason. */
  private fail(cq: CQ, wrId: number, status: WcStatus, opcode: CompletionOpcode): void {
    const wc: WorkCompletion = { wrId, status, opcode, byteLen: 0, qpNum: this.qpNum };
    if (this.reason !== '') noteFailure(wc, this.reason);
    cq.push(wc);
  }

  /** A protocol violation by the peer (its frame is malformed): the connection ends. */
  malformed(what: string): void {
    this.stats.malformedFrames++;
    this.enterError('peer_lost', `malformed frame from peer: ${what}`);
  }

  private onTransportClosed(reason: string, malformed: boolean): void {
    if (malformed) this.stats.malformedFrames++;
    this.enterError('peer_lost', reason);
  }

  /**
   * Moves to error for `reason`: every pending request and receive completes with `status`
   * (and the reason), the pipe closes; requests posted later complete the same way.
   */
  private enterError(status: WcStatus, reason: string): void {
    if (this.qpState !== 'ready') return;
    this.qpState = 'error';
    this.errorStatus = status;
    this.reason = reason;
    this.flushAll(status);
    this.transport.close();
    this.onClosed(this);
  }

  private flushAll(status: WcStatus): void {
    this.inFlight.flush(this.cq, this.qpNum, status, this.reason);
    this.receives.flush(status, this.reason);
  }

  async close(): Promise<void> {
    if (this.qpState === 'closed') return;
    if (this.qpState === 'ready') {
      this.qpState = 'closed';
      this.errorStatus = 'flushed';
      this.reason = 'the queue pair was closed locally';
      this.flushAll('flushed');
      this.transport.close();
      this.onClosed(this);
    }
    this.qpState = 'closed';
  }
}
