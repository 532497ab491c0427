import { performance } from 'node:perf_hooks';
import { TandemError } from '../errors/index.js';
import { SpinPolicy } from './spin-policy.js';
import type { CompletionQueue, WaitOptions, WorkCompletion } from './types.js';

/** How a device makes progress outside the event loop (shm rings, busy-polled sockets). */
export interface ProgressEngine {
  /** Polls every pollable transport once; true when anything happened. */
  progress(): boolean;
  /** True when busy-polling can find work that no event will announce. */
  readonly spins: boolean;
  /** The application polls or spins right now: peers need not ring the doorbell. */
  active?(): void;
  /**
   * Announces a sleep: asks peers to ring the doorbell (which drives progress from the event
   * loop, so completions wake event waiters). False when work turned up meanwhile (no sleep).
   */
  readonly arm?: (() => boolean) | undefined;
  /** Waits asleep on the doorbell (a knock ends their sleep so they poll and see the activity). */
  readonly sleepers?: Set<CQ>;
  /**
   * Sleeps up to `ms` or until a peer's data arrives (blocks the loop for at most `ms`); true
   * when it ended on data, so the wait polls at once instead of after an event-loop turn.
   */
  sleep?(ms: number): boolean | void;
}

/**
 * A wait busy-polls for the spin window (SpinPolicy: adaptive; fixed with `spin: us`; none with `spin: false`;
 * TANDEM_FABRIC_SPIN_US to fix it) in slices of at most SPIN_SLICE_MS with event-loop turns
 * between them. Then it sleeps: with a doorbell (shm) the event loop stays free and the
 * peer's doorbell (or a completion, abort, or the deadline) ends the sleep; otherwise (tcp,
 * rdma) in the kernel (poll(2)) at most SLEEP_SLICE_MS at a time, waking at once on data; a
 * sleep that says it ended on data is polled at once, without the event-loop turn between
 * slices (once in a row, so timers and sockets still run).
 */
const SPIN_SLICE_MS = 0.05;
/** A blocking sleep holds the event loop at most this long at a time. */
const SLEEP_SLICE_MS = 1;
/** A doorbell sleep re-checks this often anyway (a lost wake-up costs at most this). */
const ARMED_SLICE_MS = 50;
const DEFAULT_TIMEOUT_MS = 30_000;

/** What poll() returns when nothing completed: shared, so an idle poll allocates nothing. */
const NONE: readonly WorkCompletion[] = Object.freeze([]);

const immediate = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export class CQ implements CompletionQueue {
  /**
   * Completions waiting are items[head..tail); the array is kept and reused (slots taken are
   * cleared), so a queue that holds one completion at a time allocates no array per completion.
   */
  private items: (WorkCompletion | undefined)[] = [];
  private head = 0;
  private tail = 0;
  private readonly waiters = new Set<() => void>();
  private abortGen = 0;
  private abortReason = '';
  private readonly policy = new SpinPolicy();

  constructor(
    private readonly engine: ProgressEngine,
    readonly depth: number,
  ) {}

  get size(): number {
    return this.tail - this.head;
  }

  get sleepBlocks(): boolean {
    return this.engine.spins && this.engine.arm === undefined && this.engine.sleep !== undefined;
  }

  push(wc: WorkCompletion): void {
    const items = this.items;
    if (this.tail < items.length) items[this.tail] = wc;
    else items.push(wc);
    this.tail++;
    if (this.waiters.size > 0) this.wake();
  }

  private take(max: number): WorkCompletion[] {
    if (this.head === 0 && this.tail === this.items.length && this.tail <= max) {
      // all of them, filling the array: hand the array itself over (no copy)
      const all = this.items as WorkCompletion[];
      this.items = [];
      this.tail = 0;
      return all;
    }
    const end = Math.min(this.tail, this.head + max);
    const out = this.items.slice(this.head, end) as WorkCompletion[];
    this.drop(end);
    return out;
  }

  /** Forgets the completions before `end` (taken); the slots are cleared for reuse. */
  private drop(end: number): void {
    const items = this.items;
    for (let i = this.head; i < end; i++) items[i] = undefined;
    this.head = end;
    if (end === this.tail) this.head = this.tail = 0;
  }

  poll(max = Infinity): readonly WorkCompletion[] {
    this.engine.active?.();
    this.engine.progress();
    return this.tail === this.head ? NONE : this.take(max);
  }

  pollOne(): WorkCompletion | undefined {
    this.engine.active?.();
    this.engine.progress();
    if (this.tail === this.head) return undefined;
    const wc = this.items[this.head];
    this.drop(this.head + 1);
    return wc;
  }

  abort(reason = 'aborted'): void {
    this.abortGen++;
    this.abortReason = reason;
    this.wake();
  }

  private wake(): void {
    const all = [...this.waiters];
    this.waiters.clear();
    for (const w of all) w();
  }

  async wait(options: WaitOptions = {}): Promise<WorkCompletion[]> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const min = options.min ?? 1;
    const max = options.max ?? Infinity;
    const signal = options.signal;
    const spin = options.spin ?? true;
    const gen = this.abortGen;
    const start = performance.now();
    const deadline = start + timeoutMs;
    const onAbort = (): void => this.wake();
    signal?.addEventListener('abort', onAbort);
    try {
      // the spin window counts from the last activity (frames moved), not from the start: a
      // stream of frames keeps a wait spinning, a silent peer sends it to sleep
      let idleSince = start;
      let turned = start;
      // the last sleep ended on data and the loop polled without a turn (at most once in a row)
      let skippedTurn = false;
      for (;;) {
        if (this.abortGen !== gen || signal?.aborted) throw this.aborted(signal);
        let now = performance.now();
        if (this.engine.progress()) idleSince = this.activity(idleSince, now);
        if (this.size >= min) {
          // acks for what was received go out on the device's next tick
          this.engine.active?.();
          return this.take(max);
        }
        now = performance.now();
        if (now >= deadline) throw this.timedOut(timeoutMs, min);
        if (!this.engine.spins) {
          await this.event(Math.max(0, deadline - now));
          continue;
        }
        const window = spin === true ? this.policy.windowMs() : spin === false ? 0 : Math.max(0, spin) / 1000;
        if (now - idleSince < window) {
          this.engine.active?.();
          if (this.spin(Math.min(deadline, idleSince + window, now + SPIN_SLICE_MS), min)) {
            idleSince = this.activity(idleSince, performance.now());
            // a steady stream of frames must not starve timers, sockets and abort()
            if (idleSince - turned < SPIN_SLICE_MS) continue;
          }
          await immediate();
          turned = performance.now();
        } else if (this.engine.arm !== undefined) {
          const sleepers = this.engine.sleepers as Set<CQ>;
          sleepers.add(this);
          try {
            if (this.engine.arm()) await this.event(Math.min(ARMED_SLICE_MS, deadline - now));
          } finally {
            sleepers.delete(this);
          }
        } else {
          const woke = this.engine.sleep?.(Math.min(SLEEP_SLICE_MS, deadline - now)) === true;
          if (woke && !skippedTurn) {
            skippedTurn = true;
            continue;
          }
          skippedTurn = false;
          await immediate();
        }
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Frames moved at `now` after a quiet spell since `idleSince`: teaches the spin policy. */
  private activity(idleSince: number, now: number): number {
    this.policy.record((now - idleSince) * 1000);
    return now;
  }

  /** Ends a doorbell sleep: the device was knocked (the wait polls itself and sees the activity). */
  knocked(): void {
    if (this.waiters.size > 0) this.wake();
  }

  /** Busy-polls until `until`; true as soon as frames moved (or enough completions are there). */
  private spin(until: number, min: number): boolean {
    let i = 0;
    for (;;) {
      if (this.engine.progress() || this.size >= min) return true;
      if ((++i & 15) === 0 && performance.now() >= until) return false;
    }
  }

  private event(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.waiters.add(done);
    });
  }

  private aborted(signal: AbortSignal | undefined): TandemError {
    const reason = signal?.aborted ? String(signal.reason ?? 'signal aborted') : this.abortReason;
    return new TandemError('ABORTED', `completion queue wait aborted: ${reason}`, {
      hint: 'the wait was ended by abort(); the queue pairs are unchanged and can be waited on again',
    });
  }

  private timedOut(timeoutMs: number, min: number): TandemError {
    return new TandemError(
      'FABRIC_WAIT_TIMEOUT',
      `no ${min} completion(s) within ${timeoutMs} ms (have ${this.size})`,
      {
        hint: 'check that the peer is alive and posted matching receives, or raise timeoutMs',
        details: { timeoutMs, have: this.size, min },
      },
    );
  }
}
