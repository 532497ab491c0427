import type { CQ } from './completion-queue.js';
import { noteFailure } from './completions.js';
import { scatter } from './sgl-views.js';
import type { DeviceStats, WcStatus } from './types.js';

const MAX_UNEXPECTED_MESSAGES = 65536;
const MAX_UNEXPECTED_BYTES = 512 << 20;
/**
 * Consumed entries of a queue (posted receives here, the requester's outstanding frames in
 * outstanding.ts) are dropped once more than this many lead the array and they are most of
 * it. Kept longer, they outlive young-generation collections and are promoted into old space,
 * whose collections stall the process (docs/fabric.md).
 */
export const COMPACT_AFTER = 32;

export interface PostedRecv {
  wrId: number;
  targets: Uint8Array[];
  capacity: number;
}

/** A message (a SEND, or a write_imm's immediate) that arrived before a receive was posted. */
interface Unexpected {
  imm: number | undefined;
  /** Bytes written by the write_imm this entry stands for. */
  immLen: number;
  chunks: Uint8Array[];
  bytes: number;
  complete: boolean;
}

/** The SEND message being received in fragments. */
interface Inbound {
  recv: PostedRecv | undefined;
  into: Unexpected | undefined;
  offset: number;
  failed: boolean;
}

/**
 * A queue pair's receive side: posted receives, matched in order with incoming SENDs and
 * write_imm immediates; what arrives before a receive is posted is kept (bounded) and matched
 * when one is. Completions go to the receive CQ.
 */
export class ReceiveQueue {
  private recvs: PostedRecv[] = [];
  private recvHead = 0;
  private unexpected: Unexpected[] = [];
  private unexpectedBytes = 0;
  private inbound: Inbound | undefined;

  constructor(
    private readonly recvCq: CQ,
    private readonly stats: DeviceStats,
    private readonly qpNum: number,
  ) {}

  /** The array holding the posted receives (consumed ones lead it until it is compacted). */
  get posted(): readonly PostedRecv[] {
    return this.recvs;
  }

  post(wrId: number, targets: Uint8Array[]): void {
    let capacity = 0;
    for (const t of targets) capacity += t.length;
    this.recvs.push({ wrId, targets, capacity });
    this.drainUnexpected();
  }

  /**
   * One SEND fragment; false when it is refused (the backlog is full, or the message was longer
   * than its receive: that receive completes with local_length).
   */
  onSend(payload: Uint8Array, last: boolean): boolean {
    let msg = this.inbound;
    if (msg === undefined) {
      const recv = this.take();
      msg = { recv, into: undefined, offset: 0, failed: false };
      if (recv === undefined) {
        if (!this.stash(undefined, 0)) {
          this.stats.rejectedInvalid++;
          return false;
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
    if (!last) return true;
    if (msg.into !== undefined) {
      msg.into.complete = true;
      this.drainUnexpected();
    }
    if (msg.recv !== undefined) {
      this.complete(msg.recv, msg.failed ? 'local_length' : 'success', msg.offset, undefined);
      if (msg.failed) return false;
    }
    return true;
  }

  /** The oldest posted receive, when nothing unexpected waits before it. */
  take(): PostedRecv | undefined {
    if (this.unexpected.length > 0 || this.recvHead === this.recvs.length) return undefined;
    return this.shift();
  }

  /** Keeps an early message for a later post(); false when the backlog is full. */
  stash(imm: number | undefined, immLen: number): boolean {
    if (this.unexpected.length >= MAX_UNEXPECTED_MESSAGES || this.unexpectedBytes >= MAX_UNEXPECTED_BYTES)
      return false;
    this.unexpected.push({ imm, immLen, chunks: [], bytes: 0, complete: imm !== undefined });
    return true;
  }

  complete(r: PostedRecv, status: WcStatus, byteLen: number, imm: number | undefined): void {
    if (imm === undefined)
      this.recvCq.push({ wrId: r.wrId, status, opcode: 'recv', byteLen, qpNum: this.qpNum });
    else this.recvCq.push({ wrId: r.wrId, status, opcode: 'recv_imm', byteLen, imm, qpNum: this.qpNum });
  }

  /** Completes every posted receive (the one being filled first) with `status`, for `reason`. */
  flush(status: WcStatus, reason: string): void {
    for (let i = this.recvHead; i < this.recvs.length; i++)
      this.fail((this.recvs[i] as PostedRecv).wrId, status, reason);
    if (this.inbound?.recv) this.fail(this.inbound.recv.wrId, status, reason);
    this.inbound = undefined;
    this.recvs = [];
    this.recvHead = 0;
  }

  /** A receive that failed without data: `reason` says why (completionError shows it). */
  fail(wrId: number, status: WcStatus, reason: string | undefined): void {
    const wc = { wrId, status, opcode: 'recv' as const, byteLen: 0, qpNum: this.qpNum };
    if (reason !== undefined) noteFailure(wc, reason);
    this.recvCq.push(wc);
  }

  /** Matches complete early messages with posted receives, oldest first. */
  private drainUnexpected(): void {
    for (;;) {
      const early = this.unexpected[0];
      if (early === undefined || !early.complete || this.recvHead === this.recvs.length) return;
      const recv = this.shift();
      this.unexpected.shift();
      this.unexpectedBytes -= early.bytes;
      let at = 0;
      for (const c of early.chunks) {
        if (at + c.length <= recv.capacity) scatter(recv.targets, at, c);
        at += c.length;
      }
      if (early.imm !== undefined) this.complete(recv, 'success', early.immLen, early.imm);
      else
        this.complete(recv, early.bytes > recv.capacity ? 'local_length' : 'success', early.bytes, undefined);
    }
  }

  /**
   * Removes the oldest posted receive. The consumed prefix is dropped when the queue empties
   * or, for a consumer that always keeps receives posted, once it is most of the array, so a
   * long-lived queue pair does not keep every receive it ever had.
   */
  private shift(): PostedRecv {
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
}
