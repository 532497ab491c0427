import { availableParallelism, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { TandemError } from '../errors/index.js';
import type { CompletionQueue, WaitOptions, WorkCompletion } from './types.js';

/** How a device makes progress outside the event loop (shm rings, busy-polled sockets). */
export interface ProgressEngine {
  /** Polls every pollable transport once; true when anything happened. */
  progress(): boolean;
  /** True when busy-polling can find work that no event will announce. */
  readonly spins: boolean;
  /** Sleeps up to `ms` or until a peer rings the doorbell (blocks the loop for at most `ms`). */
  sleep?(ms: number): void;
}

/**
 * Busy-poll for the spin window after the last activity, in slices of at most
 * SPIN_SLICE_MS with event-loop turns between them, then sleep in the kernel (futex /
 * poll(2)), which wakes on data. When runnable processes outnumber cores a spinner loses
 * its timeslices to sleepers (measured here: 8 B shm ping-pong 0.5 ms spinning vs 0.08 ms
 * sleeping at load 24 on 2 cores), so the window is 0 while the load average exceeds the
 * core count. TANDEM_FABRIC_SPIN_US fixes the window (e.g. 2000 on a dedicated machine).
 */
const SPIN_SLICE_MS = 0.05;
const DEFAULT_SPIN_MS = 0.05;
const fixedSpin = process.env.TANDEM_FABRIC_SPIN_US;
let spinMs = fixedSpin === undefined ? DEFAULT_SPIN_MS : Math.max(0, Number(fixedSpin) || 0) / 1000;
let loadCheckedAt = -Infinity;

function spinWindow(now: number): number {
  if (fixedSpin === undefined && now - loadCheckedAt > 1000) {
    loadCheckedAt = now;
    spinMs = (loadavg()[0] ?? 0) > availableParallelism() + 0.5 ? 0 : DEFAULT_SPIN_MS;
  }
  return spinMs;
}
/** A sleeping wait blocks the event loop for at most this long at a time. */
const SLEEP_SLICE_MS = 1;
const DEFAULT_TIMEOUT_MS = 30_000;

const immediate = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export class CQ implements CompletionQueue {
  private items: WorkCompletion[] = [];
  private head = 0;
  private readonly waiters = new Set<() => void>();
  private abortGen = 0;
  private abortReason = '';

  constructor(
    private readonly engine: ProgressEngine,
    readonly depth: number,
  ) {}

  get size(): number {
    return this.items.length - this.head;
  }

  push(wc: WorkCompletion): void {
    this.items.push(wc);
    if (this.waiters.size > 0) this.wake();
  }

  private take(max: number): WorkCompletion[] {
    const end = Math.min(this.items.length, this.head + max);
    const out = this.items.slice(this.head, end);
    this.head = end;
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    }
    return out;
  }

  poll(max = Infinity): WorkCompletion[] {
    this.engine.progress();
    return this.size === 0 ? [] : this.take(max);
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
    const gen = this.abortGen;
    const start = performance.now();
    const deadline = start + timeoutMs;
    const onAbort = (): void => this.wake();
    signal?.addEventListener('abort', onAbort);
    try {
      let active = start;
      for (;;) {
        if (this.abortGen !== gen || signal?.aborted) throw this.aborted(signal);
        if (this.engine.progress()) active = performance.now();
        if (this.size >= min) return this.take(max);
        const now = performance.now();
        if (now >= deadline) throw this.timedOut(timeoutMs, min);
        if (this.engine.spins) {
          const window = spinWindow(now);
          if (this.spin(Math.min(deadline, now + Math.min(SPIN_SLICE_MS, window)), min))
            return this.take(max);
          if (now - active >= window && this.engine.sleep)
            this.engine.sleep(Math.min(SLEEP_SLICE_MS, deadline - now));
          await immediate();
        } else {
          await this.event(Math.max(0, deadline - now));
        }
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  private spin(until: number, min: number): boolean {
    let i = 0;
    for (;;) {
      this.engine.progress();
      if (this.size >= min) return true;
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
