import { performance } from 'node:perf_hooks';
import type { TandemError } from '../../errors/index.js';
import { yieldCore } from '../../fabric/shm-ffi.js';
import {
  Access,
  type CompletionQueue,
  type MemoryRegion,
  type ProtectionDomain,
  type RemoteAddress,
  type SendWr,
  type WorkCompletion,
} from '../../fabric/types.js';
import { failureReason } from '../../fabric/completions.js';
import { headerBytes, MessageKind, readHeader, type Header } from '../header.js';
import { EarlyBuffers } from './early-buffers.js';
import {
  abortNotice,
  closedError,
  linkFailedError,
  lostLinkError,
  readAbortNotice,
  slotOrderError,
} from './failures.js';
import {
  controlHeader,
  DEFAULT_SLOTS,
  fragmentSize,
  Link,
  slotStride,
  type LinkSpec,
  type Outgoing,
} from './link.js';
import { Mailboxes, type Message, type Settled, type Sink } from './mailboxes.js';
import { POLL_MAX, Pump } from './pump.js';
import { Registrations } from './registrations.js';
import { encodeWrId, PUT_SLOT, WrKind, wrIdKind, wrIdLink, wrIdSlot } from './wr-id.js';

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
   * waits poll with sched_yield between looks (Pump, spinUntil).
   */
  spin?: boolean;
}

/** What send() returns for a message that went out by copy at once (no promise per small send). */
export const SENT: Promise<void> = Promise.resolve();

/**
 * The message layer under every communicator of one world: one queue pair per linked
 * neighbour (Link: slots, credits, fragments), forwarding of messages whose destination is not
 * this rank (relaying along shortest routes), mailboxes per (communicator, channel, source,
 * lane) (Mailboxes), progress (Pump, or the caller itself: spinUntil), and abort propagation.
 * This class wires them and dispatches every completion (complete()).
 */
export class Router {
  readonly rank: number;
  readonly size: number;
  readonly routes: number[][];
  /** Fragments this rank forwarded for others (relaying), for tests and stats. */
  relayed = 0;
  /** One-sided writes this rank made (put()), for tests and stats. */
  puts = 0;
  /** Calls in progress on any communicator of this world (marked by the communicators). */
  busy = 0;
  /** Payload bytes per fragment: a power of two by default, so power-of-two chunks need no runt fragment. */
  readonly fragmentBytes: number;
  private readonly links: Link[] = [];
  /** Every connection to a neighbour, by wire. A message's lane picks the wire (lane % wires). */
  private readonly linkTo = new Map<number, Link[]>();
  private readonly byQp = new Map<number, Link>();
  private readonly slots: number;
  /** Bytes from one slot to the next: a header and a whole fragment, 64-byte aligned. */
  private readonly slotBytes: number;
  private readonly cq: CompletionQueue;
  private readonly spin: boolean;
  private readonly regs: Registrations;
  private readonly early = new EarlyBuffers();
  private readonly mail: Mailboxes;
  private readonly pump: Pump;
  private error: TandemError | undefined;
  private closing = false;
  /** In shutdown: a neighbour's connection ending now is its own close, not a failure. */
  private leaving = false;
  /** Ranks whose goodbye reached this rank (its own included once it is leaving). */
  private readonly byes = new Set<number>();
  private readonly abortListeners: ((e: TandemError) => void)[] = [];

  constructor(options: RouterOptions) {
    this.rank = options.rank;
    this.size = options.size;
    this.routes = options.routes;
    this.cq = options.cq;
    this.slots = options.slots ?? DEFAULT_SLOTS;
    this.spin = options.spin ?? true;
    this.fragmentBytes = fragmentSize(options.slotBytes);
    this.slotBytes = slotStride(this.fragmentBytes);
    this.regs = new Registrations(options.links[0]?.qp.pd);
    this.mail = new Mailboxes(this.rank, this.early, {
      abort: (e) => this.abort(e),
      wake: () => this.pump.unpark(),
    });
    this.pump = new Pump(this.rank, this.cq, this.spin, {
      pending: () => this.pending(),
      complete: (wcs) => {
        for (const wc of wcs) this.complete(wc);
      },
      abort: (e) => this.abort(e),
    });
    const failed = (link: Link, cause: unknown, status?: string): void =>
      this.linkFailed(link, cause, status);
    for (const spec of options.links) {
      const link = new Link(
        this.links.length,
        spec,
        this.rank,
        this.slots,
        this.slotBytes,
        this.regs,
        failed,
      );
      this.links.push(link);
      const wires = this.linkTo.get(spec.peer) ?? [];
      wires.push(link);
      this.linkTo.set(spec.peer, wires);
      this.byQp.set(spec.qp.qpNum, link);
      for (let s = 0; s < this.slots; s++) link.postRecv(s);
    }
    // Tell every neighbour where our receive slots are; until its hello arrives, a link sends.
    for (const link of this.links) link.post(link.helloMessage());
  }

  /**
   * Bytes sent to and received from each neighbour (by router rank) since the links came up,
   * over every wire: messages with their headers, forwarded fragments and one-sided puts (a put
   * raises no completion where it lands, so it counts on the sender only).
   */
  peerBytes(): Map<number, { sent: number; received: number }> {
    const out = new Map<number, { sent: number; received: number }>();
    for (const link of this.links) {
      const t = out.get(link.peer) ?? { sent: 0, received: 0 };
      t.sent += link.bytesSent;
      t.received += link.bytesReceived;
      out.set(link.peer, t);
    }
    return out;
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

  /** The pump's wake-up while it is parked, undefined while it is not (what tests look at). */
  private get parked(): (() => void) | undefined {
    return this.pump.parked;
  }

  start(): void {
    this.pump.start();
  }

  onAbort(listener: (e: TandemError) => void): void {
    this.abortListeners.push(listener);
  }

  /** Connections to each direct neighbour. */
  wiresTo(peer: number): number {
    return this.linkTo.get(peer)?.length ?? 0;
  }

  /** Whether `peer` is a direct neighbour. */
  linked(peer: number): boolean {
    return this.linkTo.has(peer);
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

  /**
   * A one-sided write of `length` bytes of `local` from `offset` to `remote` on the direct
   * neighbour `peer`, for put(): inline (copied out when posted) and unsignaled (only a
   * failure completes). Built once and posted again and again, as verbs programs keep theirs.
   */
  putRequest(
    peer: number,
    local: MemoryRegion,
    offset: number,
    length: number,
    remote: RemoteAddress,
  ): SendWr {
    const link = this.linkTo.get(peer)?.[0];
    if (link === undefined) throw new Error(`rank ${peer} is not linked to rank ${this.rank}`);
    return {
      wrId: encodeWrId(link.index, PUT_SLOT, WrKind.send),
      opcode: 'write',
      sgl: [local.sge(offset, length)],
      remote,
      inline: true,
      signaled: false,
    };
  }

  /**
   * One-sided: the write `wr` (from putRequest) posted to `peer`. The peer sees the bytes in
   * its memory once its fabric has made progress (at once over shm), after everything this
   * link carried before.
   */
  put(peer: number, wr: SendWr): void {
    if (this.error) throw this.error;
    const link = (this.linkTo.get(peer) as Link[])[0] as Link;
    if (link.dead || link.left) throw lostLinkError(this.rank, link.peer, link.left);
    try {
      link.qp.postSend(wr);
      this.puts++;
      for (const sge of wr.sgl) link.bytesSent += sge.length;
    } catch (e) {
      this.linkFailed(link, e);
      throw this.error ?? e;
    }
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
    if (link.dead || (link.left && header.dst === link.peer))
      return Promise.reject(lostLinkError(this.rank, link.peer, link.left));
    const total = payload.byteLength;
    const frag = this.fragmentBytes;
    let out: Outgoing | undefined;
    for (let off = 0; off === 0 || off < total; off += frag) {
      // a lone fragment takes the header as is; several need one each
      const h = off === 0 && total <= frag ? header : { ...header };
      h.totalBytes = total;
      h.fragOffset = off;
      const o: Outgoing = {
        header: h,
        payload: total <= frag ? payload : payload.subarray(off, Math.min(total, off + frag)),
        done: undefined,
        fail: undefined,
        own: true,
        copied: false,
      };
      link.queue.push(o);
      out = o;
    }
    link.drain();
    this.pump.unpark();
    const lastOut = out as Outgoing;
    if (lastOut.copied) return SENT;
    if (this.error) return Promise.reject(this.error);
    // still queued or being written from in place: settled by drain() or its completion
    return new Promise<void>((resolve, reject) => {
      lastOut.done = flag ? () => ((flag.settled = true), resolve()) : resolve;
      lastOut.fail = flag ? (e) => ((flag.settled = true), reject(e)) : reject;
    });
  }

  /**
   * The next message from `src` on (commId, channel, lane), in send order. Rejects with
   * COLL_TIMEOUT after `timeoutMs` (and aborts the world: a late message would desynchronise
   * every later call), or with the abort error.
   */
  recv(
    commId: number,
    channel: number,
    src: number,
    lane: number,
    timeoutMs: number,
    what: () => string,
    sink?: Sink,
    flag?: Settled,
  ): Promise<Message> {
    if (this.error) return Promise.reject(this.error);
    return this.mail.recv(this.mail.box(commId, channel, src, lane), src, timeoutMs, what, sink, flag);
  }

  /**
   * The next message from `src` on (commId, channel, lane) if it has arrived whole, without
   * waiting (and without a promise): what a small call takes after spinFor.
   */
  take(commId: number, channel: number, src: number, lane: number): Message | undefined {
    if (this.error) throw this.error;
    return this.mail.box(commId, channel, src, lane).messages.shift();
  }

  /** The header of the next message waiting whole from `src` on (commId, channel, lane), left in place. */
  peek(commId: number, channel: number, src: number, lane: number): Header | undefined {
    return this.mail.box(commId, channel, src, lane).messages[0]?.header;
  }

  /**
   * Gives back the payload of a message taken whole (take/recv) once the caller is done with
   * it: its buffer may carry the next early message. The caller must keep no view of it.
   */
  release(payload: Uint8Array): void {
    this.early.keep(payload);
  }

  /**
   * Progress driven by the caller: polls the completion queue and handles what completed, in
   * a synchronous loop, until a message from every rank of `members` but this one waits in its mailbox on
   * (commId, channel, lane 0), or `budgetMs` passed. For a small call whose sends are all
   * posted, this replaces a pump wake-up and a promise hop per message by a few polls.
   * Returns whether they all arrived.
   */
  spinFor(commId: number, channel: number, members: readonly number[], budgetMs: number): boolean {
    return this.spinUntil(this.mail.allFrom(commId, channel, members), budgetMs);
  }

  /**
   * Progress driven by the caller, in a synchronous loop, until `done()` or `budgetMs` passed,
   * polling the fabric every `pollEvery` checks of done() (a caller waiting for memory a peer
   * writes one-sidedly needs it only now and then). Returns done(). On a host with more ranks
   * than cores (RouterOptions.spin off) it gives the core away (sched_yield) before every look
   * and polls every time, as Open MPI does when oversubscribed: the peer it waits for runs at
   * once, where waiting through turns of the event loop would leave it to the scheduler.
   */
  spinUntil(done: () => boolean, budgetMs: number, pollEvery = 1): boolean {
    if (this.error || budgetMs <= 0) return false;
    const spin = this.spin;
    const until = performance.now() + budgetMs;
    for (let i = 1; !done(); i++) {
      if (!spin) yieldCore();
      if (!spin || i % pollEvery === 0) {
        const wcs = this.cq.poll(POLL_MAX);
        for (let k = 0; k < wcs.length; k++) this.complete(wcs[k] as WorkCompletion);
        if (this.error) return false;
      }
      if ((i & 15) === 0 && performance.now() > until) return done();
    }
    return true;
  }

  /**
   * Aborts this world: every pending and later receive or send fails with `error`, and an
   * abort notice floods to every neighbour (so ranks that are not linked to the cause fail
   * fast too). Returns at once.
   */
  abort(error: TandemError): void {
    if (this.error) return;
    this.error = error;
    this.pump.unpark();
    const notice = abortNotice(error);
    for (const link of this.links) link.abort(error, notice.lost, notice.body);
    this.mail.rejectAll(error);
    for (const l of this.abortListeners) l(error);
  }

  /**
   * Graceful end: floods this rank's goodbye to every rank (so peers do not mistake the
   * closing connection for a crash), then lingers, forwarding, until every rank's goodbye has
   * arrived and nothing waits to go out (at most `timeoutMs`), then closes.
   *
   * Why every rank and not just the neighbours: a rank says goodbye once its last call
   * (close()'s barrier) is done, and a message of that barrier between two other ranks may
   * still need this rank as a relay after both of its neighbours are done. Once all ranks
   * said goodbye, every barrier has completed, so no message is left to relay; and since a
   * rank forwards each goodbye before it drains and closes, every goodbye reaches every rank
   * that is still lingering.
   */
  async shutdown(timeoutMs = 30_000): Promise<void> {
    this.leaving = true;
    if (!this.error) {
      this.byes.add(this.rank);
      this.floodBye(this.rank, undefined);
      const deadline = Date.now() + timeoutMs;
      const idle = (): boolean =>
        this.links.every((l) => l.dead) ||
        (this.byes.size === this.size && this.links.every((l) => l.dead || !l.busy()));
      while (!idle() && Date.now() < deadline && !this.error) await new Promise((r) => setTimeout(r, 2));
    }
    await this.close();
  }

  /** Sends rank `origin`'s goodbye on every live link but the one it came on and the origin's own. */
  private floodBye(origin: number, from: Link | undefined): void {
    for (const link of this.links) {
      if (link.dead || link === from || link.peer === origin) continue;
      link.push({ header: controlHeader(MessageKind.bye, origin, link.peer), payload: new Uint8Array(0) });
    }
  }

  /** Stops the pump and closes every queue pair. */
  async close(): Promise<void> {
    if (this.closing) return;
    if (!this.error) {
      this.error = closedError(this.rank);
      this.mail.rejectAll(this.error);
    }
    this.closing = true;
    const stopped = this.pump.stop();
    this.mail.stopSweep();
    this.cq.abort('closing');
    await stopped;
    let timer: NodeJS.Timeout | undefined;
    const closing = Promise.all(this.links.map((l) => l.qp.close().catch(() => undefined)));
    await Promise.race([closing, new Promise((r) => (timer = setTimeout(r, 2000)))]); // never hang on a dead peer
    clearTimeout(timer);
    for (const l of this.links) l.settleAll(this.error);
    this.regs.clear();
    for (const l of this.links) l.deregister();
  }

  /** The connection towards `dst` for `lane`: next hop on the route, wire lane % wires. */
  private hop(dst: number, lane: number): Link | undefined {
    const wires = this.linkTo.get(this.routes[this.rank]?.[dst] as number);
    return wires?.[lane % wires.length];
  }

  /** The protection domain of this rank's links (all share one). */
  private pd(): ProtectionDomain {
    const pd = this.links[0]?.qp.pd;
    if (pd === undefined) throw new Error(`rank ${this.rank} has no links to register memory for`);
    return pd;
  }

  /** Whether a call waits for a message or fragments wait to go out. */
  private pending(): boolean {
    if (this.mail.waiting > 0 || this.busy > 0) return true;
    for (const l of this.links) if (l.busy()) return true;
    return false;
  }

  /**
   * Handles one completion, named by its work-request id (wr-id.ts): a put's failure, a send
   * slot coming free, or a fragment in a receive slot (for this rank, to forward, or a control
   * message of the link layer), whose slot is then posted again.
   */
  private complete(wc: WorkCompletion): void {
    const link = this.byQp.get(wc.qpNum) ?? this.links[wrIdLink(wc.wrId)];
    if (link === undefined) return;
    const slot = wrIdSlot(wc.wrId);
    if (slot === PUT_SLOT) {
      // a put() (unsignaled: only a failure completes)
      if (wc.status !== 'success')
        this.linkFailed(link, new Error(`work completion ${wc.status}`), wc.status, failureReason(wc));
      return;
    }
    const send = wrIdKind(wc.wrId) === WrKind.send;
    if (wc.status !== 'success') {
      this.linkFailed(link, new Error(`work completion ${wc.status}`), wc.status, failureReason(wc));
      if (send) link.settle(slot, this.error ?? new Error(`work completion ${wc.status}`));
      return;
    }
    if (send) return link.sendCompleted(slot);
    // message k lands in slot k % slots: sent there (by an early SEND, in posting order) or written there
    const into = link.received++ % this.slots;
    link.bytesReceived += wc.byteLen;
    if (wc.opcode === 'recv_imm' && wc.imm !== into)
      return this.abort(slotOrderError(link.peer, wc.imm, into));
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
      if (header.dst === this.rank) this.mail.deliver(header, payload);
      else this.forward(header, payload);
    } else if (header.kind === MessageKind.abort) {
      if (!this.error && !this.closing) this.abort(readAbortNotice(header, payload, link.peer));
    } else if (header.kind === MessageKind.bye) {
      // and receive on: the peer may still forward others' messages to this rank
      if (header.src === link.peer) link.peerLeft(lostLinkError(this.rank, link.peer, true));
      if (header.src < this.size && header.src !== this.rank && !this.byes.has(header.src)) {
        this.byes.add(header.src);
        this.floodBye(header.src, link);
      }
    } else if (header.kind === MessageKind.hello) {
      link.readHello(payload);
    }
    if (!link.dead && !this.closing) {
      link.postRecv(into);
      link.owed++;
    }
    link.drain();
  }

  private forward(h: Header, fragment: Uint8Array): void {
    const next = this.hop(h.dst, h.lane);
    if (next === undefined) return;
    this.relayed++;
    next.push({ header: { ...h }, payload: fragment.slice() });
  }

  private linkFailed(link: Link, cause: unknown, status?: string, reason?: string): void {
    if (link.dead) return;
    link.dead = true;
    // A neighbour whose connection ends while this rank lingers will say nothing more: it
    // counts as gone, here and (its goodbye sent on its behalf) at the ranks waiting for it.
    if (this.leaving && !this.closing && !this.error && !this.byes.has(link.peer)) {
      this.byes.add(link.peer);
      this.floodBye(link.peer, link);
    }
    // after the peer's goodbye its connection ends when it is done: not a failure
    if (this.closing || this.leaving || this.error || link.left) return;
    this.abort(linkFailedError(this.rank, link.peer, status, cause, reason));
  }
}
