import { TandemError, isTandemError } from '../errors/index.js';
import { Access, MAX_INLINE, type CompletionQueue, type MemoryRegion, type ProtectionDomain, type QueuePair, type RecvWr, type RemoteAddress, type SendWr, type WorkCompletion } from '../fabric/types.js';
import { performance } from 'node:perf_hooks';
import { yieldCore } from '../fabric/shm-ffi.js';
import { copyBytes } from '../kernels/copy.js';
import { headerBytes, MessageKind, readHeader, writeHeader, type Header } from './header.js';

/**
 * The message layer under every communicator of one world: one queue pair per linked
 * neighbour, SEND/RECV into pre-posted slots with credit flow control (a sender never has
 * more fragments in flight than the receiver posted), fragmentation of large messages,
 * forwarding of messages whose destination is not this rank (relaying along shortest
 * routes), mailboxes per (communicator, channel, source, lane), and abort propagation.
 *
 * Progress: one pump task waits on the completion queue and handles every completion,
 * independently of what the algorithms are doing; so credits always flow back and relays
 * always forward, and awaiting a send can never deadlock.
 */

export interface LinkSpec {
  peer: number;
  /** Which of the connections to `peer` this is (several "wires" stripe one pair's traffic). */
  wire: number;
  qp: QueuePair;
}

export interface RouterOptions {
  rank: number;
  size: number;
  links: LinkSpec[];
  /** nextHop[rank][dst] for this world. */
  routes: number[][];
  cq: CompletionQueue;
  /** Receive slots (and send slots) per link; default 8. */
  slots?: number;
  /** Payload bytes per fragment (a slot holds one fragment and its header); default 256 KiB. */
  slotBytes?: number;
  /**
   * Whether the pump may busy-poll while a call is active (default true). False when this
   * host runs more ranks than it has cores: spinners then take the cores their peers need, so
   * waits poll with sched_yield between looks (pollSlice, spinUntil).
   */
  spin?: boolean;
}

/** A message delivered to a mailbox: the header of its first fragment and the whole payload. */
export interface Message {
  header: Header;
  payload: Uint8Array;
}

interface Outgoing {
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

/**
 * Set (synchronously, inside the router's progress) when a send's or receive's promise is
 * settled, so a caller that drives progress itself knows when to stop (Router.spinUntil).
 */
export interface Settled {
  settled: boolean;
}

/** What send() returns for a message that went out by copy at once (no promise per small send). */
export const SENT: Promise<void> = Promise.resolve();

/** A registration of a caller's buffer, reused while the buffer comes back (LRU, bounded). */
interface Registered {
  mr: MemoryRegion;
  inflight: number;
  used: number;
}

/** Payloads at least this long are written from the caller's memory without a copy. */
const ZERO_COPY_MIN = 64 * 1024;
/** Caller buffers kept registered at most (RDMA hardware caps regions per device). */
const MAX_REGISTERED = 16;

interface Link {
  index: number;
  peer: number;
  qp: QueuePair;
  mr: MemoryRegion;
  view: DataView;
  /** Address of each slot of `mr` (computed once: a BigInt sum per message is garbage per message). */
  slotAddr: bigint[];
  /** The receive request of each receive slot, reposted as is. */
  recvWr: RecvWr[];
  freeSend: number[];
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
  inFlight: (Outgoing | undefined)[];
  /** Messages posted / received on this link so far: message k uses slot k % slots on the receiver. */
  sent: number;
  received: number;
}

/**
 * Consumes a message fragment by fragment straight from the receive slots (no reassembly
 * copy). `check` sees the first fragment's header and may refuse the message.
 */
export interface Sink {
  check(header: Header): TandemError | undefined;
  /** `fragment` is only valid during the call; `offset` is its byte offset in the message. */
  consume(fragment: Uint8Array, offset: number): void;
}

interface Waiter {
  resolve: (m: Message) => void;
  reject: (e: unknown) => void;
  /** performance.now() past which the wait fails with COLL_TIMEOUT (checked by the sweep). */
  deadline: number;
  timeout: () => TandemError;
  sink: Sink | undefined;
}

interface Box {
  messages: Message[];
  waiters: Waiter[];
  partial: Message | undefined;
  /** The waiter a partial message streams into, if it was waiting when the message began. */
  streaming: Waiter | undefined;
  filled: number;
}

const EMPTY = new Uint8Array(0);

const NO_RANK = 0xffff;

/**
 * Early messages at least this long are received into kept buffers; at most MAX_SPARES are
 * kept. A fresh typed array of this size or more lives outside the V8 heap, and allocating
 * them per message brings collections of the whole heap (2 ranks, 32 KiB all-reduce taken
 * whole: p90 110 us with fresh buffers).
 */
const SPARE_MIN = 1024;
const MAX_SPARES = 8;
/** Early messages under SPARE_MIN bytes are carved from slabs of this size (see Router.early). */
const SLAB_BYTES = 64 * 1024;

/** How often waiting receives are checked against their deadlines (at most). */
const SWEEP_MS = 50;

/**
 * How long the pump polls after the last completion while no call waits (while one does, it
 * polls throughout): busy when the router may spin (RouterOptions.spin: no more ranks on
 * this host than cores), else giving its core away between polls. TANDEM_COLL_SPIN_US fixes it.
 */
const DEFAULT_SPIN_MS = 0.5;
const fixedSpin = process.env.TANDEM_COLL_SPIN_US;
const spinMs = fixedSpin === undefined ? DEFAULT_SPIN_MS : Math.max(0, Number(fixedSpin) || 0) / 1000;
/** Longest synchronous stretch of the pump's spin (between turns of the event loop). */
const SPIN_SLICE_MS = 0.02;
/**
 * After this long with no call active and nothing received, a pump whose fabric wait blocks
 * the thread (tcp: poll(2) 1 ms at a time with an event-loop turn between, as libuv needs the
 * thread; CompletionQueue.sleepBlocks) polls from a PARK_MS timer instead, until a call, a
 * send or an abort wakes it: ~1,000 wake-ups a second kept an idle rank at ~5% of a core.
 * shm's doorbell sleep costs nothing while idle and is kept.
 */
const PARK_AFTER_MS = 1000;
const PARK_MS = 10;
const DEFAULT_SLOTS = 8;
/** The send-slot number in the work request id of a put() (no send slot has it). */
const PUT_SLOT = 32767;
const DEFAULT_FRAGMENT_BYTES = 256 * 1024;

/** Fragment payload for a requested size: at least 1 KiB, a multiple of 64 (element-aligned). */
function fragmentSize(requested = DEFAULT_FRAGMENT_BYTES): number {
  return Math.max(1024, Math.floor(requested / 64) * 64);
}

/** One slot: the header, padded to 64 bytes, then a whole fragment. */
function slotStride(fragment: number): number {
  return fragment + Math.ceil(headerBytes / 64) * 64;
}

/** Bytes the router registers per link (its receive slots and its send slots). */
export function linkBufferBytes(slots = DEFAULT_SLOTS, slotBytes?: number): number {
  return 2 * slots * slotStride(fragmentSize(slotBytes));
}

/** After the microtasks queued now, and any they queue in turn, have run. */
export const nextTurn = (): Promise<void> => new Promise<void>((resolve) => setImmediate(resolve));

export class Router {
  readonly rank: number;
  readonly size: number;
  readonly routes: number[][];
  /** Fragments this rank forwarded for others (relaying), for tests and stats. */
  relayed = 0;
  /** One-sided writes this rank made (put()), for tests and stats. */
  puts = 0;
  private readonly links: Link[] = [];
  /** Every connection to a neighbour, by wire. A message's lane picks the wire (lane % wires). */
  private readonly linkTo = new Map<number, Link[]>();
  private readonly byQp = new Map<number, Link>();
  /** Every mailbox, for sweeps and aborts. */
  private readonly boxes: Box[] = [];
  /** Mailboxes by (commId, channel), then by (src, lane): numeric keys, no string per lookup. */
  private readonly boxIndex = new Map<number, Map<number, Box>>();
  private readonly peerBoxCache = new Map<number, Box[]>();
  private readonly slots: number;
  /** Bytes from one slot to the next: a header and a whole fragment, 64-byte aligned. */
  private readonly slotBytes: number;
  /** Payload bytes per fragment: a power of two by default, so power-of-two chunks need no runt fragment. */
  readonly fragmentBytes: number;
  private readonly cq: CompletionQueue;
  private readonly pumpAbort = new AbortController();
  private error: TandemError | undefined;
  private closing = false;
  /** Wakes the pump while it is parked (see PARK_AFTER_MS). */
  private parked: (() => void) | undefined;
  /** In shutdown: a neighbour's connection ending now is its own close, not a failure. */
  private leaving = false;
  private pumpDone: Promise<void> = Promise.resolve();
  private readonly abortListeners: ((e: TandemError) => void)[] = [];
  private readonly regs = new Map<ArrayBufferLike, Registered>();
  private regClock = 0;
  private sweeper: NodeJS.Timeout | undefined;
  private readonly spares: Uint8Array[] = [];
  private slab = new Uint8Array(0);
  private slabUsed = 0;
  private readonly spin: boolean;
  /** Receives that wait for a message (the pump spins while there are any). */
  private waiting = 0;
  /** Calls in progress on any communicator of this world (marked by the communicators). */
  busy = 0;

  constructor(options: RouterOptions) {
    this.rank = options.rank;
    this.size = options.size;
    this.routes = options.routes;
    this.cq = options.cq;
    this.slots = options.slots ?? DEFAULT_SLOTS;
    this.spin = options.spin ?? true;
    this.fragmentBytes = fragmentSize(options.slotBytes);
    this.slotBytes = slotStride(this.fragmentBytes);
    for (const spec of options.links) {
      // receive slots [0, slots) are written by the peer directly; send slots [slots, 2 slots)
      const mr = spec.qp.pd.allocate(2 * this.slots * this.slotBytes, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
      const link: Link = {
        index: this.links.length,
        peer: spec.peer,
        qp: spec.qp,
        mr,
        view: new DataView(mr.buffer.buffer, mr.buffer.byteOffset, mr.buffer.byteLength),
        slotAddr: Array.from({ length: 2 * this.slots }, (_, s) => mr.addr + BigInt(s * this.slotBytes)),
        recvWr: Array.from({ length: this.slots }, (_, s) => ({ wrId: this.links.length * 65536 + s * 2 + 1, sgl: [mr.sge(s * this.slotBytes, this.slotBytes)] })),
        freeSend: Array.from({ length: this.slots }, (_, i) => this.slots + i),
        credits: this.slots,
        owed: 0,
        queue: [],
        queueHead: 0,
        dead: false,
        left: false,
        remote: undefined,
        inFlight: new Array<Outgoing | undefined>(2 * this.slots),
        sent: 0,
        received: 0,
      };
      this.links.push(link);
      const wires = this.linkTo.get(spec.peer) ?? [];
      wires.push(link);
      this.linkTo.set(spec.peer, wires);
      this.byQp.set(spec.qp.qpNum, link);
      for (let s = 0; s < this.slots; s++) this.postRecv(link, s);
    }
    // Tell every neighbour where our receive slots are; until its hello arrives, a link sends.
    for (const link of this.links) {
      const h = controlHeader(MessageKind.hello, this.rank, link.peer);
      const payload = new Uint8Array(16);
      const d = new DataView(payload.buffer);
      const addr = link.mr.addr;
      d.setUint32(0, Number(addr & 0xffffffffn), true);
      d.setUint32(4, Number(addr >> 32n), true);
      d.setUint32(8, link.mr.rkey >>> 0, true);
      d.setUint32(12, this.slots * this.slotBytes, true);
      h.totalBytes = payload.byteLength;
      this.post(link, { header: h, payload });
    }
  }

  /** Bytes of the links' slot regions (what `linkBufferBytes` predicts per link). */
  get bufferBytes(): number {
    return this.links.reduce((sum, l) => sum + l.mr.length, 0);
  }

  /** Caller buffers registered for zero-copy sends right now (bounded LRU), for tests and stats. */
  get registrations(): number {
    return this.regs.size;
  }

  get aborted(): TandemError | undefined {
    return this.error;
  }

  start(): void {
    this.pumpDone = this.pump();
  }

  onAbort(listener: (e: TandemError) => void): void {
    this.abortListeners.push(listener);
  }

  /** The connection towards `dst` for `lane`: next hop on the route, wire lane % wires. */
  private hop(dst: number, lane: number): Link | undefined {
    const wires = this.linkTo.get(this.routes[this.rank]?.[dst] as number);
    return wires?.[lane % wires.length];
  }

  /** Connections to each direct neighbour. */
  wiresTo(peer: number): number {
    return this.linkTo.get(peer)?.length ?? 0;
  }

  /**
   * A region of `bytes` that linked ranks may write one-sidedly (see put()); allocated
   * through the fabric, so on shm it lives in shared memory. The caller deregisters it.
   */
  allocate(bytes: number): MemoryRegion {
    return this.pd().allocate(bytes, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
  }

  /** Registers this process's own `buffer` as a source of put()s (a plain buffer: V8 writes shared memory slowly). */
  register(buffer: Uint8Array): MemoryRegion {
    return this.pd().register(buffer, Access.LOCAL_WRITE);
  }

  /** The protection domain of this rank's links (all share one). */
  private pd(): ProtectionDomain {
    const pd = this.links[0]?.qp.pd;
    if (pd === undefined) throw new Error(`rank ${this.rank} has no links to register memory for`);
    return pd;
  }

  /**
   * A one-sided write of `length` bytes of `local` from `offset` to `remote` on the direct
   * neighbour `peer`, for put(): inline (copied out when posted) and unsignaled (only a
   * failure completes). Built once and posted again and again, as verbs programs keep theirs.
   */
  putRequest(peer: number, local: MemoryRegion, offset: number, length: number, remote: RemoteAddress): SendWr {
    const link = this.linkTo.get(peer)?.[0];
    if (link === undefined) throw new Error(`rank ${peer} is not linked to rank ${this.rank}`);
    return { wrId: link.index * 65536 + PUT_SLOT * 2, opcode: 'write', sgl: [local.sge(offset, length)], remote, inline: true, signaled: false };
  }

  /**
   * One-sided: the write `wr` (from putRequest) posted to `peer`. The peer sees the bytes in
   * its memory once its fabric has made progress (at once over shm), after everything this
   * link carried before.
   */
  put(peer: number, wr: SendWr): void {
    if (this.error) throw this.error;
    const link = (this.linkTo.get(peer) as Link[])[0] as Link;
    if (link.dead || link.left) throw this.lostLink(link);
    try {
      link.qp.postSend(wr);
      this.puts++;
    } catch (e) {
      this.linkFailed(link, e);
      throw this.error ?? e;
    }
  }

  /** The header of the next message waiting whole from `src` on (commId, channel, lane), left in place. */
  peek(commId: number, channel: number, src: number, lane: number): Header | undefined {
    return this.box(commId, channel, src, lane).messages[0]?.header;
  }

  /** Whether `peer` is a direct neighbour. */
  linked(peer: number): boolean {
    return this.linkTo.has(peer);
  }

  private postRecv(link: Link, slot: number): void {
    link.qp.postRecv(link.recvWr[slot] as RecvWr);
  }

  /**
   * Queues a message for `header.dst`; resolves when every fragment has been copied out of
   * `payload` (the caller may then reuse it). Rejects once the router is aborted. The router
   * owns `header` from then on (it fills in the fragment fields).
   */
  send(header: Header, payload: Uint8Array, flag?: Settled): Promise<void> {
    if (this.error) return Promise.reject(this.error);
    const link = this.hop(header.dst, header.lane);
    if (link === undefined) throw new Error(`no route from ${this.rank} to ${header.dst}`);
    if (link.dead || (link.left && header.dst === link.peer)) return Promise.reject(this.lostLink(link));
    const total = payload.byteLength;
    const frag = this.fragmentBytes;
    let out: Outgoing | undefined;
    for (let off = 0; off === 0 || off < total; off += frag) {
      // a lone fragment takes the header as is; several need one each
      const h = off === 0 && total <= frag ? header : { ...header };
      h.totalBytes = total;
      h.fragOffset = off;
      const o: Outgoing = { header: h, payload: total <= frag ? payload : payload.subarray(off, Math.min(total, off + frag)), done: undefined, fail: undefined, own: true, copied: false };
      link.queue.push(o);
      out = o;
    }
    this.drain(link);
    this.unpark();
    const lastOut = out as Outgoing;
    if (lastOut.copied) return SENT;
    if (this.error) return Promise.reject(this.error);
    // still queued or being written from in place: settled by drain() or its completion
    return new Promise<void>((resolve, reject) => {
      lastOut.done = flag ? () => ((flag.settled = true), resolve()) : resolve;
      lastOut.fail = flag ? (e) => ((flag.settled = true), reject(e)) : reject;
    });
  }

  private lostLink(link: Link): TandemError {
    const why = link.left ? `rank ${link.peer} closed its communicator` : `the link to rank ${link.peer} is closed`;
    return new TandemError('COLL_PEER_LOST', `rank ${this.rank}: ${why}`, {
      hint: 'a rank closed (or died) while others still needed it; make the same calls on every rank before close()',
      details: { rank: link.peer, reportedBy: this.rank },
    });
  }

  /** Posts queued fragments while slots and credits allow (one credit stays for control messages). */
  private drain(link: Link): void {
    while (link.queueHead < link.queue.length && link.freeSend.length > 0 && !link.dead) {
      const out = link.queue[link.queueHead] as Outgoing;
      const control = out.header.kind !== MessageKind.data;
      if (link.credits < (control ? 1 : 2)) break;
      link.queueHead++;
      if (!this.post(link, out)) {
        out.copied = true;
        out.done?.();
      }
    }
    // drop sent fragments early: kept longer they are promoted and die in old space (see COMPACT_AFTER in fabric/queue-pair.ts)
    if (link.queueHead > 32 && link.queueHead * 2 > link.queue.length) {
      link.queue = link.queue.slice(link.queueHead);
      link.queueHead = 0;
    }
    // Return credits without data when enough are owed; this may use the reserved credit,
    // so two ranks both blocked on credits can always unblock each other.
    if (link.owed >= this.slots / 2 && link.credits >= 1 && link.freeSend.length > 0 && !link.dead) {
      this.post(link, { header: controlHeader(MessageKind.credit, this.rank, link.peer), payload: new Uint8Array(0) });
    }
  }

  /** Posts one fragment; true when it goes zero-copy (it is settled on its completion, not now). */
  private post(link: Link, out: Outgoing): boolean {
    const slot = link.freeSend.pop() as number;
    const at = slot * this.slotBytes;
    out.header.credits = link.owed;
    link.owed = 0;
    link.credits--;
    writeHeader(link.view, at, out.header);
    const len = out.payload.byteLength;
    const reg = out.own && link.remote !== undefined && len >= ZERO_COPY_MIN ? this.registered(out.payload) : undefined;
    let sgl;
    if (reg) {
      reg.inflight++;
      link.inFlight[slot] = out;
      sgl = [{ addr: link.slotAddr[slot] as bigint, length: headerBytes, lkey: link.mr.lkey }, reg.mr.sge(out.payload.byteOffset, len)];
    } else {
      copyBytes(link.mr.buffer, at + headerBytes, out.payload);
      sgl = [{ addr: link.slotAddr[slot] as bigint, length: headerBytes + len, lkey: link.mr.lkey }];
    }
    const target = link.sent++ % this.slots;
    const wrId = link.index * 65536 + slot * 2;
    // A copied fragment that fits goes inline and unsignaled: the fabric copies it out before
    // postSend returns, so the slot is free at once and needs no completion, nor the ACK
    // behind one (only failures complete). 2-rank 8 B all-reduce over shm: see docs/collectives.md.
    const inline = reg === undefined && headerBytes + len <= MAX_INLINE;
    try {
      if (link.remote === undefined) link.qp.postSend({ wrId, opcode: 'send', sgl, inline, signaled: !inline });
      else link.qp.postSend({ wrId, opcode: 'write_imm', sgl, remote: link.remote[target] as RemoteAddress, imm: target, inline, signaled: !inline });
    } catch (e) {
      this.linkFailed(link, e);
    }
    if (inline) link.freeSend.push(slot);
    return reg !== undefined;
  }

  /** The registration of the buffer under `bytes` (registered on first use, evicted LRU when idle). */
  private registered(bytes: Uint8Array): Registered | undefined {
    const buffer = bytes.buffer;
    let r = this.regs.get(buffer);
    if (r === undefined) {
      if (this.regs.size >= MAX_REGISTERED) {
        let oldest: [ArrayBufferLike, Registered] | undefined;
        for (const e of this.regs) if (e[1].inflight === 0 && (oldest === undefined || e[1].used < oldest[1].used)) oldest = e;
        if (oldest === undefined) return undefined;
        this.regs.delete(oldest[0]);
        oldest[1].mr.deregister();
      }
      const pd = this.links[0]?.qp.pd;
      if (pd === undefined) return undefined;
      try {
        r = { mr: pd.register(new Uint8Array(buffer), Access.NONE), inflight: 0, used: 0 };
      } catch {
        return undefined;
      }
      this.regs.set(buffer, r);
    }
    r.used = ++this.regClock;
    return r;
  }

  /** A zero-copy fragment's write completed (or failed): the caller's memory is free again. */
  private settle(link: Link, slot: number, error?: unknown): void {
    const out = link.inFlight[slot];
    if (out === undefined) return;
    link.inFlight[slot] = undefined;
    const r = this.regs.get(out.payload.buffer);
    if (r) r.inflight--;
    if (error === undefined) out.done?.();
    else out.fail?.(error);
  }

  /**
   * The next message from `src` on (commId, channel, lane), in send order. Rejects with
   * COLL_TIMEOUT after `timeoutMs` (and aborts the world: a late message would desynchronise
   * every later call), or with the abort error.
   */
  recv(commId: number, channel: number, src: number, lane: number, timeoutMs: number, what: () => string, sink?: Sink, flag?: Settled): Promise<Message> {
    if (this.error) return Promise.reject(this.error);
    const box = this.box(commId, channel, src, lane);
    const ready = box.messages.shift();
    if (ready) {
      if (flag) flag.settled = true;
      if (sink === undefined) return Promise.resolve(ready);
      const e = this.sinkWhole(sink, ready);
      return e ? Promise.reject(e) : Promise.resolve({ header: ready.header, payload: EMPTY });
    }
    return new Promise<Message>((done, failed) => {
      const resolve = flag ? (m: Message): void => ((flag.settled = true), done(m)) : done;
      const reject = flag ? (e: unknown): void => ((flag.settled = true), failed(e)) : failed;
      const timeout = (): TandemError =>
        new TandemError('COLL_TIMEOUT', `rank ${this.rank} waited ${timeoutMs} ms for rank ${src} in ${what()}`, {
          hint: `check that rank ${src} is alive and makes the same sequence of collective calls, or raise the communicator's timeoutMs`,
          details: { rank: this.rank, peer: src, timeoutMs },
        });
      box.waiters.push({ resolve, reject, deadline: performance.now() + timeoutMs, timeout, sink });
      this.waiting++;
      this.unpark();
      // one sweep timer checks every deadline (a timer per receive costs more than the receive)
      this.sweeper ??= setInterval(() => this.sweep(), Math.max(1, Math.min(SWEEP_MS, timeoutMs / 4)));
    });
  }

  /**
   * The next message from `src` on (commId, channel, lane) if it has arrived whole, without
   * waiting (and without a promise): what a small call takes after spinFor.
   */
  take(commId: number, channel: number, src: number, lane: number): Message | undefined {
    if (this.error) throw this.error;
    return this.box(commId, channel, src, lane).messages.shift();
  }

  /**
   * Progress driven by the caller: polls the completion queue and handles what completed, in
   * a synchronous loop, until a message from every rank of `members` but this one waits in its mailbox on
   * (commId, channel, lane 0), or `budgetMs` passed. For a small call whose sends are all
   * posted, this replaces a pump wake-up and a promise hop per message by a few polls.
   * Returns whether they all arrived.
   */
  spinFor(commId: number, channel: number, members: readonly number[], budgetMs: number): boolean {
    this.mailFrom = this.peerBoxes(commId, channel, members);
    return this.spinUntil(this.allMail, budgetMs);
  }

  /** What spinFor() waits for: one predicate for the router's life (no closure per call). */
  private mailFrom: readonly Box[] = [];
  private readonly allMail = (): boolean => allHaveMail(this.mailFrom);

  /**
   * Progress driven by the caller, in a synchronous loop, until `done()` or `budgetMs` passed,
   * polling the fabric every `pollEvery` checks of done() (a caller waiting for memory a peer
   * writes one-sidedly needs it only now and then). Returns done(). On a host with more ranks
   * than cores (RouterOptions.spin off) it gives the core away (sched_yield) before every look
   * and polls every time, as Open MPI does when oversubscribed: the peer it waits for runs at
   * once. Returning at once there instead, and waiting through turns of the event loop, cost
   * 4 ranks on 2 cores 27-29 us per 8 B all-reduce against 6.5-8.8 us (docs/collectives.md).
   */
  spinUntil(done: () => boolean, budgetMs: number, pollEvery = 1): boolean {
    if (this.error || budgetMs <= 0) return false;
    const spin = this.spin;
    const until = performance.now() + budgetMs;
    for (let i = 1; !done(); i++) {
      if (!spin) yieldCore();
      if (!spin || i % pollEvery === 0) {
        const wcs = this.cq.poll(512);
        for (let k = 0; k < wcs.length; k++) this.complete(wcs[k] as WorkCompletion);
        if (this.error) return false;
      }
      if ((i & 15) === 0 && performance.now() > until) return done();
    }
    return true;
  }

  /** Fails the world with COLL_TIMEOUT when a receive waited past its deadline; stops when nothing waits. */
  private sweep(): void {
    if (this.waiting <= 0 || this.error) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
      return;
    }
    const now = performance.now();
    for (const box of this.boxes) {
      const late = [box.streaming, ...box.waiters].find((w) => w !== undefined && now > w.deadline);
      if (late) return this.abort(late.timeout());
    }
  }

  /** The lane-0 mailboxes of (commId, channel) from every rank of `members` but this one (kept per communicator). */
  private peerBoxes(commId: number, channel: number, members: readonly number[]): Box[] {
    const k = commId * 2 + channel;
    let boxes = this.peerBoxCache.get(k);
    if (boxes === undefined) this.peerBoxCache.set(k, (boxes = members.filter((m) => m !== this.rank).map((m) => this.box(commId, channel, m, 0))));
    return boxes;
  }

  private box(commId: number, channel: number, src: number, lane: number): Box {
    const k = commId * 2 + channel;
    let byPeer = this.boxIndex.get(k);
    if (byPeer === undefined) this.boxIndex.set(k, (byPeer = new Map()));
    let box = byPeer.get(src * 256 + lane);
    if (box === undefined) {
      box = { messages: [], waiters: [], partial: undefined, streaming: undefined, filled: 0 };
      byPeer.set(src * 256 + lane, box);
      this.boxes.push(box);
    }
    return box;
  }

  /** Ends the pump's parked poll at once: a call or send needs it. */
  private unpark(): void {
    const wake = this.parked;
    if (wake === undefined) return;
    this.parked = undefined;
    wake();
  }

  /** Resolves after PARK_MS, or sooner on unpark(). */
  private park(): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = (): void => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        if (this.parked === wake) this.parked = undefined;
        resolve();
      }, PARK_MS);
      this.parked = wake;
    });
  }

  private async pump(): Promise<void> {
    let idleSince = performance.now();
    let settled = false;
    while (!this.closing) {
      let wcs: readonly WorkCompletion[];
      try {
        wcs = this.cq.poll(512);
        if (wcs.length === 0) {
          // Spin in slices, with a turn of the event loop between them (continuations, timers,
          // sockets), while a call is active and for the spin window after; then fall back to
          // the fabric's sleeping wait.
          const now = performance.now();
          if (this.pending()) idleSince = now;
          if (spinMs > 0 && now - idleSince <= spinMs) {
            wcs = this.pollSlice();
            if (wcs.length === 0) {
              await nextTurn();
              continue;
            }
          } else if (!settled) {
            // The fabric's wait may block the thread in the kernel before it first yields: let
            // everything runnable here run first (it may be about to post the send the peer
            // waits for), then poll once more before sleeping.
            settled = true;
            await nextTurn();
            continue;
          } else if (this.cq.sleepBlocks && now - idleSince > PARK_AFTER_MS) {
            await this.park();
            continue;
          } else {
            wcs = await this.cq.wait({ timeoutMs: 1000, signal: this.pumpAbort.signal, max: 512, spin: this.spin });
          }
        }
      } catch (e) {
        if (isTandemError(e, 'FABRIC_WAIT_TIMEOUT')) continue;
        if (this.closing || this.pumpAbort.signal.aborted) return;
        this.abort(new TandemError('COLL_ABORTED', `rank ${this.rank}: waiting for completions failed: ${(e as Error).message}`, { hint: 'see the cause', cause: e }));
        return;
      }
      settled = false;
      for (const wc of wcs) this.complete(wc);
      idleSince = performance.now();
      // Let the algorithms run what these completions unblocked (and post their next sends):
      // a whole chain of continuations, not just the first link of each.
      await nextTurn();
    }
  }

  /**
   * Polls in one synchronous stretch of up to SPIN_SLICE_MS, until something completes.
   * Spinning through an await per poll made a promise of garbage at every turn (a scavenge
   * every few ms, each stalling both ranks) and slipped between the links of every chain of
   * continuations the algorithms run. On a host with more ranks than cores (`spin` off) the
   * core goes to whoever is runnable between polls (sched_yield, as Open MPI does when
   * oversubscribed), so a peer that has work runs at once instead of after a knock and a
   * wake-up (4 ranks on 2 cores, 8 B all-reduce: 760 -> 217 us).
   */
  private pollSlice(): readonly WorkCompletion[] {
    const until = performance.now() + SPIN_SLICE_MS;
    let wcs = this.cq.poll(512);
    for (let i = 1; wcs.length === 0; i++) {
      if (!this.spin) yieldCore();
      if ((!this.spin || (i & 15) === 0) && performance.now() > until) break;
      wcs = this.cq.poll(512);
    }
    return wcs;
  }

  /** Whether a call waits for a message or fragments wait to go out. */
  private pending(): boolean {
    if (this.waiting > 0 || this.busy > 0) return true;
    for (const l of this.links) if (l.queueHead < l.queue.length || l.freeSend.length < this.slots) return true;
    return false;
  }

  private complete(wc: WorkCompletion): void {
    const link = this.byQp.get(wc.qpNum) ?? this.links[Math.floor(wc.wrId / 65536)];
    if (link === undefined) return;
    const slot = (wc.wrId % 65536) >> 1;
    if (slot === PUT_SLOT) {
      // a put() (unsignaled: only a failure completes)
      if (wc.status !== 'success') this.linkFailed(link, new Error(`work completion ${wc.status}`), wc.status);
      return;
    }
    if (wc.status !== 'success') {
      this.linkFailed(link, new Error(`work completion ${wc.status}`), wc.status);
      if ((wc.wrId & 1) === 0) this.settle(link, slot, this.error ?? new Error(`work completion ${wc.status}`));
      return;
    }
    if ((wc.wrId & 1) === 0) {
      this.settle(link, slot);
      link.freeSend.push(slot);
      this.drain(link);
      return;
    }
    // message k lands in slot k % slots: sent there (by an early SEND, in posting order) or written there
    const into = link.received++ % this.slots;
    if (wc.opcode === 'recv_imm' && wc.imm !== into) {
      this.abort(new TandemError('COLL_BAD_MESSAGE', `rank ${link.peer} wrote receive slot ${String(wc.imm)} where slot ${into} was next`, { hint: 'every rank must run the same tandem version', details: { from: link.peer } }));
      return;
    }
    const at = into * this.slotBytes;
    let header: Header;
    try {
      header = readHeader(link.view, at, wc.byteLen, link.peer);
    } catch (e) {
      this.abort(e as TandemError);
      return;
    }
    link.credits += header.credits;
    const payload = link.mr.buffer.subarray(at + headerBytes, at + wc.byteLen);
    if (header.kind === MessageKind.data) {
      if (header.dst === this.rank) this.deliver(header, payload);
      else this.forward(header, payload);
    } else if (header.kind === MessageKind.abort) {
      this.remoteAbort(header, payload, link.peer);
    } else if (header.kind === MessageKind.bye) {
      this.peerLeft(link); // and receive on: the peer may still forward others' messages to this rank
    } else if (header.kind === MessageKind.hello && payload.byteLength >= 16) {
      const d = new DataView(payload.buffer, payload.byteOffset, 16);
      if (d.getUint32(12, true) === this.slots * this.slotBytes) {
        const base = (BigInt(d.getUint32(4, true)) << 32n) | BigInt(d.getUint32(0, true));
        const rkey = d.getUint32(8, true);
        link.remote = Array.from({ length: this.slots }, (_, k) => ({ addr: base + BigInt(k * this.slotBytes), rkey }));
      }
    }
    if (!link.dead && !this.closing) {
      this.postRecv(link, into);
      link.owed++;
    }
    this.drain(link);
  }

  /**
   * Hands a complete message to a sink (the message arrived before its receiver asked, or
   * began before it did); the error, when the sink refuses it (the world is then aborted).
   */
  private sinkWhole(sink: Sink, m: Message): TandemError | undefined {
    const e = sink.check(m.header);
    if (e) {
      this.abort(e);
      return e;
    }
    sink.consume(m.payload, 0);
    this.spare(m.payload);
    return undefined;
  }

  /**
   * A buffer for a message that arrived before its receive was posted. Large ones come from a
   * few kept buffers (a fresh zero-filled one per early message costs more than the copy);
   * small ones are carved from a slab: views of one buffer, each handed out once (a full slab
   * is dropped, and freed with its last view). A small typed array of its own gets an
   * ArrayBuffer of its own once a kernel views its bytes as another type, and each dead one
   * costs the next scavenge: 2-rank 8 B all-reduce over shm, p50 4.0 -> 2.8 us, scavenges
   * 0.8 -> 0.2 ms. spare() never keeps a slab: it takes only payloads of SPARE_MIN or more.
   */
  private early(bytes: number): Uint8Array {
    if (bytes < SPARE_MIN) {
      let at = this.slabUsed;
      if (at + bytes > this.slab.byteLength) {
        this.slab = new Uint8Array(SLAB_BYTES);
        at = 0;
      }
      this.slabUsed = (at + bytes + 7) & ~7; // 8-byte aligned for any element type
      return this.slab.subarray(at, at + bytes);
    }
    const spares = this.spares;
    for (let i = 0; i < spares.length; i++) {
      const b = spares[i] as Uint8Array;
      if (b.byteLength < bytes || b.byteLength > 4 * bytes) continue;
      spares[i] = spares[spares.length - 1] as Uint8Array;
      spares.pop();
      return b.subarray(0, bytes);
    }
    return new Uint8Array(bytes);
  }

  /** Keeps a consumed early message's buffer for the next one. */
  private spare(payload: Uint8Array): void {
    if (payload.byteLength >= SPARE_MIN && this.spares.length < MAX_SPARES) this.spares.push(new Uint8Array(payload.buffer));
  }

  /**
   * Gives back the payload of a message taken whole (take/recv) once the caller is done with
   * it: its buffer may carry the next early message. The caller must keep no view of it.
   */
  release(payload: Uint8Array): void {
    this.spare(payload);
  }

  private deliver(h: Header, fragment: Uint8Array): void {
    const box = this.box(h.commId, h.channel, h.src, h.lane);
    if (h.fragOffset === 0) {
      box.filled = 0;
      const w = box.waiters[0];
      if (w?.sink) {
        const e = w.sink.check(h);
        if (e) {
          this.abort(e);
          return;
        }
        box.waiters.shift();
        box.streaming = w;
        box.partial = { header: h, payload: EMPTY };
      } else {
        box.streaming = undefined;
        box.partial = { header: h, payload: this.early(h.totalBytes) };
      }
    }
    const m = box.partial;
    if (m === undefined) return;
    const streaming = box.streaming;
    if (streaming) streaming.sink?.consume(fragment, h.fragOffset);
    else copyBytes(m.payload, h.fragOffset, fragment);
    box.filled += fragment.byteLength;
    if (box.filled < h.totalBytes) return;
    box.partial = undefined;
    box.streaming = undefined;
    const w = streaming ?? box.waiters.shift();
    if (w === undefined) {
      box.messages.push(m);
      return;
    }
    this.waiting--;
    if (streaming || w.sink === undefined) return w.resolve(m);
    const e = this.sinkWhole(w.sink, m);
    if (e) w.reject(e);
    else w.resolve({ header: m.header, payload: EMPTY });
  }

  private forward(h: Header, fragment: Uint8Array): void {
    const next = this.hop(h.dst, h.lane);
    if (next === undefined) return;
    this.relayed++;
    next.queue.push({ header: { ...h }, payload: fragment.slice() });
    this.drain(next);
  }

  /**
   * The peer closes on purpose (its goodbye): messages for it can no longer be read, so those
   * still queued fail instead of hanging; the link itself stays up, since the peer goes on
   * forwarding for ranks that still finish their last call through it (close()'s barrier on a
   * line or a star) until every neighbour has said goodbye too.
   */
  private peerLeft(link: Link): void {
    link.left = true;
    const e = this.lostLink(link);
    const keep: Outgoing[] = [];
    for (let i = link.queueHead; i < link.queue.length; i++) {
      const out = link.queue[i] as Outgoing;
      if (out.header.dst === link.peer && out.header.kind === MessageKind.data) out.fail?.(e);
      else keep.push(out);
    }
    link.queue = keep;
    link.queueHead = 0;
  }

  private linkFailed(link: Link, cause: unknown, status?: string): void {
    if (link.dead) return;
    link.dead = true;
    // after the peer's goodbye its connection ends when it is done: not a failure
    if (this.closing || this.leaving || this.error || link.left) return;
    this.abort(
      new TandemError('COLL_PEER_LOST', `rank ${this.rank} lost its link to rank ${link.peer} (${status ?? 'post failed'})`, {
        hint: `rank ${link.peer} died or its connection broke; the communicator is aborted: create a new one with the surviving ranks`,
        details: { rank: link.peer, reportedBy: this.rank, status },
        cause,
      }),
    );
  }

  private remoteAbort(h: Header, payload: Uint8Array, from: number): void {
    if (this.error || this.closing) return;
    let info: { code?: string; message?: string; rank?: number } = {};
    try {
      info = JSON.parse(new TextDecoder().decode(payload)) as typeof info;
    } catch {
      info = {};
    }
    const code = info.code === 'COLL_PEER_LOST' || info.code === 'COLL_MISMATCH' || info.code === 'COLL_TIMEOUT' ? info.code : 'COLL_ABORTED';
    const lost = h.aux === NO_RANK ? undefined : h.aux;
    const text = code === 'COLL_PEER_LOST' && lost !== undefined ? `rank ${lost} was lost (reported by rank ${h.src} via rank ${from}): ${info.message ?? ''}` : `rank ${h.src} aborted the communicator: ${info.message ?? 'no reason given'}`;
    this.abort(
      new TandemError(code, text, {
        hint: code === 'COLL_MISMATCH' ? 'make every rank call the same collectives in the same order with the same count, dtype and op' : 'the communicator is aborted on every rank; create a new one',
        details: { rank: lost ?? h.src, reportedBy: h.src },
      }),
    );
  }

  /**
   * Aborts this world: every pending and later receive or send fails with `error`, and an
   * abort notice floods to every neighbour (so ranks that are not linked to the cause fail
   * fast too). Returns at once.
   */
  abort(error: TandemError): void {
    if (this.error) return;
    this.error = error;
    this.unpark();
    const lost = error.code === 'COLL_PEER_LOST' && typeof error.details.rank === 'number' ? error.details.rank : NO_RANK;
    const body = new TextEncoder().encode(JSON.stringify({ code: error.code, message: error.message, rank: lost }).slice(0, 4000));
    for (const link of this.links) {
      for (let slot = 0; slot < link.inFlight.length; slot++) this.settle(link, slot, error);
      for (let i = link.queueHead; i < link.queue.length; i++) link.queue[i]?.fail?.(error);
      link.queue = [];
      link.queueHead = 0;
      if (link.dead) continue;
      const h = controlHeader(MessageKind.abort, this.rank, link.peer);
      h.aux = lost;
      h.totalBytes = body.byteLength;
      if (link.credits >= 1 && link.freeSend.length > 0) this.post(link, { header: h, payload: body });
    }
    for (const box of this.boxes) {
      const all = box.streaming ? [box.streaming, ...box.waiters] : box.waiters;
      for (const w of all) w.reject(error);
      box.waiters = [];
      box.streaming = undefined;
    }
    this.waiting = 0;
    for (const l of this.abortListeners) l(error);
  }

  /**
   * Graceful end: says goodbye on every link (so peers do not mistake the closing connection
   * for a crash), waits up to `timeoutMs` for queued fragments to leave, then closes.
   */
  async shutdown(timeoutMs = 30_000): Promise<void> {
    this.leaving = true;
    if (!this.error) {
      for (const link of this.links) {
        if (link.dead) continue;
        link.queue.push({ header: controlHeader(MessageKind.bye, this.rank, link.peer), payload: new Uint8Array(0) });
        this.drain(link);
      }
      // Linger until every neighbour said goodbye too: meanwhile this rank keeps forwarding,
      // so ranks that still finish their last call through it (relays) are not cut off.
      const deadline = Date.now() + timeoutMs;
      const idle = (): boolean => this.links.every((l) => l.dead || l.left);
      while (!idle() && Date.now() < deadline && !this.error) await new Promise((r) => setTimeout(r, 2));
    }
    await this.close();
  }

  /** Stops the pump and closes every queue pair. */
  async close(): Promise<void> {
    if (this.closing) return;
    if (!this.error) {
      this.error = new TandemError('COLL_ABORTED', `rank ${this.rank}: the communicator is closed`, { hint: 'create a new communicator' });
      for (const box of this.boxes) {
        for (const w of box.streaming ? [box.streaming, ...box.waiters] : box.waiters) w.reject(this.error);
      }
    }
    this.closing = true;
    this.pumpAbort.abort('closing');
    this.unpark();
    clearInterval(this.sweeper);
    this.sweeper = undefined;
    this.cq.abort('closing');
    await this.pumpDone;
    let timer: NodeJS.Timeout | undefined;
    const closing = Promise.all(this.links.map((l) => l.qp.close().catch(() => undefined)));
    await Promise.race([closing, new Promise((r) => (timer = setTimeout(r, 2000)))]); // never hang on a dead peer
    clearTimeout(timer);
    for (const l of this.links) for (let slot = 0; slot < l.inFlight.length; slot++) this.settle(l, slot, this.error);
    for (const r of this.regs.values()) {
      try {
        r.mr.deregister();
      } catch {
        /* already gone with its device */
      }
    }
    this.regs.clear();
    for (const l of this.links) {
      try {
        l.mr.deregister();
      } catch {
        /* already gone with its device */
      }
    }
  }
}

function allHaveMail(boxes: readonly Box[]): boolean {
  for (let i = 0; i < boxes.length; i++) if ((boxes[i] as Box).messages.length === 0) return false;
  return true;
}


function controlHeader(kind: number, src: number, dst: number): Header {
  return { kind, op: 0, dtype: 0, reduce: 0, algorithm: 0, lane: 0, step: 0, commId: 0, seq: 0, count: 0, src, dst, totalBytes: 0, fragOffset: 0, credits: 0, aux: 0, channel: 0 };
}
