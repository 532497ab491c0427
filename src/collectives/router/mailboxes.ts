import { performance } from 'node:perf_hooks';
import { TandemError } from '../../errors/index.js';
import { copyBytes } from '../../kernels/copy.js';
import type { Header } from '../header.js';
import type { EarlyBuffers } from './early-buffers.js';

/** A message delivered to a mailbox: the header of its first fragment and the whole payload. */
export interface Message {
  header: Header;
  payload: Uint8Array;
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

/**
 * Set (synchronously, inside the router's progress) when a send's or receive's promise is
 * settled, so a caller that drives progress itself knows when to stop (Router.spinUntil).
 */
export interface Settled {
  settled: boolean;
}

/** What the mailboxes need from their router. */
export interface MailHost {
  /** Aborts the world: a sink refused a message, or a receive waited past its deadline. */
  abort(e: TandemError): void;
  /** A receive now waits: the pump must poll. */
  wake(): void;
}

interface Waiter {
  resolve: (m: Message) => void;
  reject: (e: unknown) => void;
  /** performance.now() past which the wait fails with COLL_TIMEOUT (checked by the sweep). */
  deadline: number;
  timeout: () => TandemError;
  sink: Sink | undefined;
}

/** The mailbox of one (communicator, channel, source, lane): messages in send order. */
export interface Box {
  /** Messages that arrived whole before their receive. */
  messages: Message[];
  waiters: Waiter[];
  /** The message whose fragments are arriving. */
  partial: Message | undefined;
  /** The waiter a partial message streams into, if it was waiting when the message began. */
  streaming: Waiter | undefined;
  /** Payload bytes of `partial` arrived so far. */
  filled: number;
}

const EMPTY = new Uint8Array(0);

/** How often waiting receives are checked against their deadlines (at most). */
const SWEEP_MS = 50;

function allHaveMail(boxes: readonly Box[]): boolean {
  for (let i = 0; i < boxes.length; i++) if ((boxes[i] as Box).messages.length === 0) return false;
  return true;
}

/**
 * Every mailbox of one router, keyed by numbers (no string per lookup): (commId, channel),
 * then (src, lane). A message either streams into the receive that waited for it (its sink,
 * fragment by fragment) or waits whole, in a buffer from `early`, for its receive.
 */
export class Mailboxes {
  /** Receives that wait for a message (the pump spins while there are any). */
  waiting = 0;
  /** Every mailbox, for sweeps and aborts. */
  private readonly boxes: Box[] = [];
  private readonly index = new Map<number, Map<number, Box>>();
  private readonly peerBoxCache = new Map<number, Box[]>();
  private sweeper: NodeJS.Timeout | undefined;
  /** What allMail() checks: one predicate for the router's life (no closure per call). */
  private mailFrom: readonly Box[] = [];
  private readonly allMail = (): boolean => allHaveMail(this.mailFrom);

  constructor(
    private readonly rank: number,
    private readonly early: EarlyBuffers,
    private readonly host: MailHost,
  ) {}

  box(commId: number, channel: number, src: number, lane: number): Box {
    const k = commId * 2 + channel;
    let byPeer = this.index.get(k);
    if (byPeer === undefined) this.index.set(k, (byPeer = new Map()));
    let box = byPeer.get(src * 256 + lane);
    if (box === undefined) {
      box = { messages: [], waiters: [], partial: undefined, streaming: undefined, filled: 0 };
      byPeer.set(src * 256 + lane, box);
      this.boxes.push(box);
    }
    return box;
  }

  /**
   * The predicate "a message from every rank of `members` but this one waits whole on
   * (commId, channel, lane 0)"; the same function for every call (what Router.spinFor spins on).
   */
  allFrom(commId: number, channel: number, members: readonly number[]): () => boolean {
    this.mailFrom = this.peerBoxes(commId, channel, members);
    return this.allMail;
  }

  /**
   * The next message of `box` for a receive: at once if it waits there whole, else when it
   * arrives (streamed into `sink` if given), or rejected with COLL_TIMEOUT after `timeoutMs`.
   */
  recv(
    box: Box,
    src: number,
    timeoutMs: number,
    what: () => string,
    sink?: Sink,
    flag?: Settled,
  ): Promise<Message> {
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
        new TandemError(
          'COLL_TIMEOUT',
          `rank ${this.rank} waited ${timeoutMs} ms for rank ${src} in ${what()}`,
          {
            hint: `check that rank ${src} is alive and makes the same sequence of collective calls, or raise the communicator's timeoutMs`,
            details: { rank: this.rank, peer: src, timeoutMs },
          },
        );
      box.waiters.push({ resolve, reject, deadline: performance.now() + timeoutMs, timeout, sink });
      this.waiting++;
      this.host.wake();
      // one sweep timer checks every deadline (a timer per receive costs more than the receive)
      this.sweeper ??= setInterval(() => this.sweep(), Math.max(1, Math.min(SWEEP_MS, timeoutMs / 4)));
    });
  }

  /**
   * A fragment of a message for this rank. The first one decides where the message goes: into
   * the first waiting receive if that has a sink (which may refuse it: the world is then
   * aborted), else into a buffer where it waits whole (for that receive, or a later one).
   */
  deliver(h: Header, fragment: Uint8Array): void {
    const box = this.box(h.commId, h.channel, h.src, h.lane);
    if (h.fragOffset === 0) {
      box.filled = 0;
      const w = box.waiters[0];
      if (w?.sink) {
        const e = w.sink.check(h);
        if (e) {
          this.host.abort(e);
          return;
        }
        box.waiters.shift();
        box.streaming = w;
        box.partial = { header: h, payload: EMPTY };
      } else {
        box.streaming = undefined;
        box.partial = { header: h, payload: this.early.take(h.totalBytes) };
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

  /** Fails every waiting receive with `error` (the world is aborted or closed). */
  rejectAll(error: unknown): void {
    for (const box of this.boxes) {
      const all = box.streaming ? [box.streaming, ...box.waiters] : box.waiters;
      for (const w of all) w.reject(error);
      box.waiters = [];
      box.streaming = undefined;
    }
    this.waiting = 0;
  }

  stopSweep(): void {
    clearInterval(this.sweeper);
    this.sweeper = undefined;
  }

  /**
   * Hands a complete message to a sink (the message arrived before its receiver asked, or
   * began before it did); the error, when the sink refuses it (the world is then aborted).
   */
  private sinkWhole(sink: Sink, m: Message): TandemError | undefined {
    const e = sink.check(m.header);
    if (e) {
      this.host.abort(e);
      return e;
    }
    sink.consume(m.payload, 0);
    this.early.keep(m.payload);
    return undefined;
  }

  /** Fails the world with COLL_TIMEOUT when a receive waited past its deadline; stops when nothing waits. */
  private sweep(): void {
    if (this.waiting <= 0) {
      this.stopSweep();
      return;
    }
    const now = performance.now();
    for (const box of this.boxes) {
      const late = [box.streaming, ...box.waiters].find((w) => w !== undefined && now > w.deadline);
      if (late) return this.host.abort(late.timeout());
    }
  }

  /** The lane-0 mailboxes of (commId, channel) from every rank of `members` but this one (kept per communicator). */
  private peerBoxes(commId: number, channel: number, members: readonly number[]): Box[] {
    const k = commId * 2 + channel;
    let boxes = this.peerBoxCache.get(k);
    if (boxes === undefined)
      this.peerBoxCache.set(
        k,
        (boxes = members.filter((m) => m !== this.rank).map((m) => this.box(commId, channel, m, 0))),
      );
    return boxes;
  }
}
