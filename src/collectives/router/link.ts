import {
  Access,
  MAX_INLINE,
  type MemoryRegion,
  type QueuePair,
  type RecvWr,
  type RemoteAddress,
} from '../../fabric/types.js';
import { copyBytes } from '../../kernels/copy.js';
import { headerBytes, MessageKind, writeHeader, type Header } from '../header.js';
import type { Registrations } from './registrations.js';
import { encodeWrId, WrKind } from './wr-id.js';

export interface LinkSpec {
  peer: number;
  /** Which of the connections to `peer` this is (several "wires" stripe one pair's traffic). */
  wire: number;
  qp: QueuePair;
}

/** One fragment waiting in a link's queue (or, zero-copy, being written). */
export interface Outgoing {
  header: Header;
  payload: Uint8Array;
  /** Resolves the sender once its last fragment is copied out (or, zero-copy, written). */
  done?: (() => void) | undefined;
  fail?: ((e: unknown) => void) | undefined;
  /** The payload is the caller's memory and may be written from in place (not a relay's copy). */
  own?: boolean;
  /** Posted by copy: the caller's memory is free already. */
  copied?: boolean;
}

/** A failed post or completion on `link` (`status`: the completion's, if one failed). */
export type LinkFailure = (link: Link, cause: unknown, status?: string) => void;

export const DEFAULT_SLOTS = 8;
const DEFAULT_FRAGMENT_BYTES = 256 * 1024;
/** Payloads at least this long are written from the caller's memory without a copy. */
const ZERO_COPY_MIN = 64 * 1024;
/** Bytes of a hello's payload (see helloPayload). */
const HELLO_BYTES = 16;

/** Fragment payload for a requested size: at least 1 KiB, a multiple of 64 (element-aligned). */
export function fragmentSize(requested = DEFAULT_FRAGMENT_BYTES): number {
  return Math.max(1024, Math.floor(requested / 64) * 64);
}

/** One slot: the header, padded to 64 bytes, then a whole fragment. */
export function slotStride(fragment: number): number {
  return fragment + Math.ceil(headerBytes / 64) * 64;
}

/** Bytes the router registers per link (its receive slots and its send slots). */
export function linkBufferBytes(slots = DEFAULT_SLOTS, slotBytes?: number): number {
  return 2 * slots * slotStride(fragmentSize(slotBytes));
}

/** The header of a message of the link layer itself (credit, abort, bye, hello). */
export function controlHeader(kind: number, src: number, dst: number): Header {
  return {
    kind,
    op: 0,
    dtype: 0,
    reduce: 0,
    algorithm: 0,
    lane: 0,
    step: 0,
    commId: 0,
    seq: 0,
    count: 0,
    src,
    dst,
    totalBytes: 0,
    fragOffset: 0,
    credits: 0,
    aux: 0,
    channel: 0,
  };
}

/**
 * One queue pair to a neighbour and its region: receive slots [0, slots) that the peer writes
 * directly, then send slots [slots, 2 slots) that fragments are copied into. Credit flow
 * control: a sender never has more fragments in flight than the receiver posted slots, and
 * one credit stays reserved for control messages, so two ranks both blocked on credits can
 * always unblock each other. Message k on a link lands in the receiver's slot k % slots.
 */
export class Link {
  readonly index: number;
  readonly peer: number;
  readonly qp: QueuePair;
  readonly mr: MemoryRegion;
  readonly view: DataView;
  /** Address of each slot of `mr` (computed once: a BigInt sum per message is garbage per message). */
  readonly slotAddr: bigint[];
  /** The receive request of each receive slot, reposted as is. */
  readonly recvWr: RecvWr[];
  readonly freeSend: number[];
  credits: number;
  owed: number;
  queue: Outgoing[];
  queueHead: number;
  dead: boolean;
  /**
   * The peer said goodbye: it sends nothing of its own any more, but it still forwards (it
   * lingers until every neighbour has said goodbye), so only messages for it are refused.
   */
  left: boolean;
  /**
   * The address of each of the peer's receive slots, once its hello arrived: fragments then go
   * by RDMA WRITE WITH IMMEDIATE (computed once: a BigInt sum per post is garbage per message).
   */
  remote: RemoteAddress[] | undefined;
  /** Per send slot: the zero-copy fragment it carries (settled when the write completes). */
  readonly inFlight: (Outgoing | undefined)[];
  /** Messages posted / received on this link so far: message k uses slot k % slots on the receiver. */
  sent: number;
  received: number;
  /** Bytes posted to the peer (headers included) and bytes arrived from it, since the link came up. */
  bytesSent = 0;
  bytesReceived = 0;

  constructor(
    index: number,
    spec: LinkSpec,
    /** This router's own rank. */
    readonly rank: number,
    readonly slots: number,
    /** Bytes from one slot to the next (see slotStride). */
    readonly slotBytes: number,
    private readonly regs: Registrations,
    private readonly failed: LinkFailure,
  ) {
    this.index = index;
    this.peer = spec.peer;
    this.qp = spec.qp;
    const mr = spec.qp.pd.allocate(2 * slots * slotBytes, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
    this.mr = mr;
    this.view = new DataView(mr.buffer.buffer, mr.buffer.byteOffset, mr.buffer.byteLength);
    this.slotAddr = Array.from({ length: 2 * slots }, (_, s) => mr.addr + BigInt(s * slotBytes));
    this.recvWr = Array.from({ length: slots }, (_, s) => ({
      wrId: encodeWrId(index, s, WrKind.recv),
      sgl: [mr.sge(s * slotBytes, slotBytes)],
    }));
    this.freeSend = Array.from({ length: slots }, (_, i) => slots + i);
    this.credits = slots;
    this.owed = 0;
    this.queue = [];
    this.queueHead = 0;
    this.dead = false;
    this.left = false;
    this.remote = undefined;
    this.inFlight = new Array<Outgoing | undefined>(2 * slots);
    this.sent = 0;
    this.received = 0;
  }

  postRecv(slot: number): void {
    this.qp.postRecv(this.recvWr[slot] as RecvWr);
  }

  /** Whether fragments wait to go out or are out and not completed. */
  busy(): boolean {
    return this.queueHead < this.queue.length || this.freeSend.length < this.slots;
  }

  /** Queues `out` and posts what slots and credits allow. */
  push(out: Outgoing): void {
    this.queue.push(out);
    this.drain();
  }

  /** Posts queued fragments while slots and credits allow (one credit stays for control messages). */
  drain(): void {
    while (this.queueHead < this.queue.length && this.freeSend.length > 0 && !this.dead) {
      const out = this.queue[this.queueHead] as Outgoing;
      const control = out.header.kind !== MessageKind.data;
      if (this.credits < (control ? 1 : 2)) break;
      this.queueHead++;
      if (!this.post(out)) {
        out.copied = true;
        out.done?.();
      }
    }
    // drop sent fragments early: kept longer they are promoted and die in old space (see COMPACT_AFTER in fabric/receive-queue.ts)
    if (this.queueHead > 32 && this.queueHead * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.queueHead);
      this.queueHead = 0;
    }
    // Return credits without data when enough are owed; this may use the reserved credit.
    if (this.owed >= this.slots / 2 && this.credits >= 1 && this.freeSend.length > 0 && !this.dead) {
      this.post({
        header: controlHeader(MessageKind.credit, this.rank, this.peer),
        payload: new Uint8Array(0),
      });
    }
  }

  /**
   * Posts one fragment into a free send slot, with the credits owed to the peer; true when it
   * goes zero-copy (it is settled on its completion, not now). Before the peer's hello it goes
   * by SEND, after it straight into the peer's next receive slot by WRITE WITH IMMEDIATE.
   */
  post(out: Outgoing): boolean {
    const slot = this.freeSend.pop() as number;
    const at = slot * this.slotBytes;
    out.header.credits = this.owed;
    this.owed = 0;
    this.credits--;
    writeHeader(this.view, at, out.header);
    const len = out.payload.byteLength;
    const reg =
      out.own && this.remote !== undefined && len >= ZERO_COPY_MIN
        ? this.regs.acquire(out.payload)
        : undefined;
    let sgl;
    if (reg) {
      this.inFlight[slot] = out;
      sgl = [
        { addr: this.slotAddr[slot] as bigint, length: headerBytes, lkey: this.mr.lkey },
        reg.mr.sge(out.payload.byteOffset, len),
      ];
    } else {
      copyBytes(this.mr.buffer, at + headerBytes, out.payload);
      sgl = [{ addr: this.slotAddr[slot] as bigint, length: headerBytes + len, lkey: this.mr.lkey }];
    }
    this.bytesSent += headerBytes + len;
    const target = this.sent++ % this.slots;
    const wrId = encodeWrId(this.index, slot, WrKind.send);
    // A copied fragment that fits goes inline and unsignaled: the fabric copies it out before
    // postSend returns, so the slot is free at once and needs no completion, nor the ACK
    // behind one (only failures complete).
    const inline = reg === undefined && headerBytes + len <= MAX_INLINE;
    try {
      if (this.remote === undefined)
        this.qp.postSend({ wrId, opcode: 'send', sgl, inline, signaled: !inline });
      else
        this.qp.postSend({
          wrId,
          opcode: 'write_imm',
          sgl,
          remote: this.remote[target] as RemoteAddress,
          imm: target,
          inline,
          signaled: !inline,
        });
    } catch (e) {
      this.failed(this, e);
    }
    if (inline) this.freeSend.push(slot);
    return reg !== undefined;
  }

  /** A signaled send from `slot` completed: its zero-copy fragment is settled and the slot is free. */
  sendCompleted(slot: number): void {
    this.settle(slot);
    this.freeSend.push(slot);
    this.drain();
  }

  /** A zero-copy fragment's write completed (or failed): the caller's memory is free again. */
  settle(slot: number, error?: unknown): void {
    const out = this.inFlight[slot];
    if (out === undefined) return;
    this.inFlight[slot] = undefined;
    this.regs.release(out.payload.buffer);
    if (error === undefined) out.done?.();
    else out.fail?.(error);
  }

  /** Fails every zero-copy fragment in flight with `error`. */
  settleAll(error: unknown): void {
    for (let slot = 0; slot < this.inFlight.length; slot++) this.settle(slot, error);
  }

  /**
   * The hello this link sends first, naming its receive slots:
   * u32 address low, u32 address high, u32 rkey, u32 bytes of the receive slots (little-endian).
   */
  helloMessage(): Outgoing {
    const h = controlHeader(MessageKind.hello, this.rank, this.peer);
    const payload = new Uint8Array(HELLO_BYTES);
    const d = new DataView(payload.buffer);
    const addr = this.mr.addr;
    d.setUint32(0, Number(addr & 0xffffffffn), true);
    d.setUint32(4, Number(addr >> 32n), true);
    d.setUint32(8, this.mr.rkey >>> 0, true);
    d.setUint32(12, this.slots * this.slotBytes, true);
    h.totalBytes = payload.byteLength;
    return { header: h, payload };
  }

  /** The peer's hello (see helloMessage): from now on fragments are written into its slots. */
  readHello(payload: Uint8Array): void {
    if (payload.byteLength < HELLO_BYTES) return;
    const d = new DataView(payload.buffer, payload.byteOffset, HELLO_BYTES);
    if (d.getUint32(12, true) !== this.slots * this.slotBytes) return;
    const base = (BigInt(d.getUint32(4, true)) << 32n) | BigInt(d.getUint32(0, true));
    const rkey = d.getUint32(8, true);
    this.remote = Array.from({ length: this.slots }, (_, k) => ({
      addr: base + BigInt(k * this.slotBytes),
      rkey,
    }));
  }

  /**
   * The peer said goodbye: queued messages for it fail with `error`; messages through it (and
   * from it) still go, since it forwards until every neighbour has said goodbye too.
   */
  peerLeft(error: unknown): void {
    this.left = true;
    const keep: Outgoing[] = [];
    for (let i = this.queueHead; i < this.queue.length; i++) {
      const out = this.queue[i] as Outgoing;
      if (out.header.dst === this.peer && out.header.kind === MessageKind.data) out.fail?.(error);
      else keep.push(out);
    }
    this.queue = keep;
    this.queueHead = 0;
  }

  /**
   * The world is aborted: every fragment in flight or queued fails with `error`, and the abort
   * notice (`body`, naming the lost rank `lost` in the header's aux) goes out if a slot and a
   * credit allow.
   */
  abort(error: unknown, lost: number, body: Uint8Array): void {
    this.settleAll(error);
    for (let i = this.queueHead; i < this.queue.length; i++) this.queue[i]?.fail?.(error);
    this.queue = [];
    this.queueHead = 0;
    if (this.dead) return;
    const h = controlHeader(MessageKind.abort, this.rank, this.peer);
    h.aux = lost;
    h.totalBytes = body.byteLength;
    if (this.credits >= 1 && this.freeSend.length > 0) this.post({ header: h, payload: body });
  }

  /** Deregisters the slot region (the router closes). */
  deregister(): void {
    try {
      this.mr.deregister();
    } catch {
      /* already gone with its device */
    }
  }
}
