import type { CQ } from './completion-queue.js';
import { noteFailure } from './completions.js';
import { COMPACT_AFTER } from './receive-queue.js';
import type { SendWr, WcStatus } from './types.js';

/** One frame in flight: a work request is split into frames of at most MAX_PAYLOAD bytes. */
export interface OutstandingFrame {
  psn: number;
  /** The work request's number on this queue pair: its frames share it. */
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

/** a comes strictly before b in sequence space (mod 2^32, window 2^31). */
export function psnBefore(a: number, b: number): boolean {
  const d = (b - a) >>> 0;
  return d !== 0 && d < 0x80000000;
}

/**
 * The requester's frames in flight, in posting order (which is psn order): the responder
 * answers in order, so frames leave from the head only. Consumed entries are dropped in
 * batches (COMPACT_AFTER), never one by one.
 */
export class OutstandingFrames {
  private list: OutstandingFrame[] = [];
  private head = 0;

  /** The array holding the frames: those in flight are `items` from `first` on. */
  get items(): readonly OutstandingFrame[] {
    return this.list;
  }

  get first(): number {
    return this.head;
  }

  push(e: OutstandingFrame): void {
    this.list.push(e);
  }

  get empty(): boolean {
    return this.head === this.list.length;
  }

  /** The oldest frame still in flight. */
  peek(): OutstandingFrame | undefined {
    return this.list[this.head];
  }

  /** Removes the oldest frame (the caller checked there is one). */
  shift(): OutstandingFrame {
    return this.list[this.head++] as OutstandingFrame;
  }

  /** Drops the remaining frames of a failed work request so it completes once. */
  skipGroup(group: number): void {
    while (this.head < this.list.length && (this.list[this.head] as OutstandingFrame).group === group)
      this.head++;
  }

  compact(): void {
    if (this.head === this.list.length) {
      this.list = [];
      this.head = 0;
    } else if (this.head > COMPACT_AFTER && this.head * 2 > this.list.length) {
      this.list = this.list.slice(this.head);
      this.head = 0;
    }
  }

  /** Completes every work request in flight once with `status`, for `reason`, and empties the list. */
  flush(cq: CQ, qpNum: number, status: WcStatus, reason: string): void {
    let group = -1;
    for (let i = this.head; i < this.list.length; i++) {
      const e = this.list[i] as OutstandingFrame;
      if (e.group === group) continue;
      group = e.group;
      const wc = { wrId: e.wrId, status, opcode: e.opcode, byteLen: 0, qpNum };
      noteFailure(wc, reason);
      cq.push(wc);
    }
    this.list = [];
    this.head = 0;
  }
}
