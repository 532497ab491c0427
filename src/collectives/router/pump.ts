import { performance } from 'node:perf_hooks';
import { TandemError, isTandemError } from '../../errors/index.js';
import { yieldCore } from '../../fabric/shm-ffi.js';
import type { CompletionQueue, WorkCompletion } from '../../fabric/types.js';

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
 * send or an abort wakes it: a thousand wake-ups a second would keep an idle rank busy.
 * shm's doorbell sleep costs nothing while idle and is kept.
 */
const PARK_AFTER_MS = 1000;
const PARK_MS = 10;
/** Completions taken per poll at most. */
export const POLL_MAX = 512;

/** After the microtasks queued now, and any they queue in turn, have run. */
export const nextTurn = (): Promise<void> => new Promise<void>((resolve) => setImmediate(resolve));

/** What the pump drives. */
export interface PumpHost {
  /** Whether a call waits for a message or fragments wait to go out (the pump then polls throughout). */
  pending(): boolean;
  /** Handles what completed. */
  complete(wcs: readonly WorkCompletion[]): void;
  /** The fabric's wait failed: the world is aborted with `e`. */
  abort(e: TandemError): void;
}

/**
 * The router's progress: one task that waits on the completion queue and handles every
 * completion, independently of what the algorithms are doing; so credits always flow back and
 * relays always forward, and awaiting a send can never deadlock. It spins while a call is
 * active and for a short window after, then sleeps in the fabric's wait, or parks on a timer
 * where that wait would keep the thread busy.
 */
export class Pump {
  /** Wakes the pump while it is parked (see PARK_AFTER_MS); undefined while it is not. */
  parked: (() => void) | undefined = undefined;
  private stopped = false;
  private readonly stopper = new AbortController();
  private done: Promise<void> = Promise.resolve();

  constructor(
    private readonly rank: number,
    private readonly cq: CompletionQueue,
    /** Whether it may busy-poll (RouterOptions.spin). */
    private readonly spin: boolean,
    private readonly host: PumpHost,
  ) {}

  start(): void {
    this.done = this.run();
  }

  /** Stops the loop (and its fabric wait); resolves once it has returned. */
  stop(): Promise<void> {
    this.stopped = true;
    this.stopper.abort('closing');
    this.unpark();
    return this.done;
  }

  /** Ends the pump's parked poll at once: a call or send needs it. */
  unpark(): void {
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

  private async run(): Promise<void> {
    let idleSince = performance.now();
    let settled = false;
    while (!this.stopped) {
      let wcs: readonly WorkCompletion[];
      try {
        wcs = this.cq.poll(POLL_MAX);
        if (wcs.length === 0) {
          // Spin in slices, with a turn of the event loop between them (continuations, timers,
          // sockets), while a call is active and for the spin window after; then fall back to
          // the fabric's sleeping wait.
          const now = performance.now();
          if (this.host.pending()) idleSince = now;
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
            wcs = await this.cq.wait({
              timeoutMs: 1000,
              signal: this.stopper.signal,
              max: POLL_MAX,
              spin: this.spin,
            });
          }
        }
      } catch (e) {
        if (isTandemError(e, 'FABRIC_WAIT_TIMEOUT')) continue;
        if (this.stopped) return;
        this.host.abort(
          new TandemError(
            'COLL_ABORTED',
            `rank ${this.rank}: waiting for completions failed: ${(e as Error).message}`,
            { hint: 'see the cause', cause: e },
          ),
        );
        return;
      }
      settled = false;
      this.host.complete(wcs);
      idleSince = performance.now();
      // Let the algorithms run what these completions unblocked (and post their next sends):
      // a whole chain of continuations, not just the first link of each.
      await nextTurn();
    }
  }

  /**
   * Polls in one synchronous stretch of up to SPIN_SLICE_MS, until something completes. A
   * synchronous loop makes no promise per poll (garbage, and every scavenge stalls both ranks)
   * and cannot slip between the links of a chain of continuations the algorithms run. On a
   * host with more ranks than cores (`spin` off) the core goes to whoever is runnable between
   * polls (sched_yield, as Open MPI does when oversubscribed), so a peer that has work runs at
   * once instead of after a knock and a wake-up.
   */
  private pollSlice(): readonly WorkCompletion[] {
    const until = performance.now() + SPIN_SLICE_MS;
    let wcs = this.cq.poll(POLL_MAX);
    for (let i = 1; wcs.length === 0; i++) {
      if (!this.spin) yieldCore();
      if ((!this.spin || (i & 15) === 0) && performance.now() > until) break;
      wcs = this.cq.poll(POLL_MAX);
    }
    return wcs;
  }
}
