import type { ClusterView } from '../cluster/index.js';
import type { DashboardSnapshot } from './dashboard-snapshot.js';
import type { Metrics } from './metrics.js';

export type { DashboardSnapshot } from './dashboard-snapshot.js';

/** What the feed reads from the server each second. */
export interface DashboardSources {
  metrics: Metrics;
  status: () => DashboardSnapshot['status'];
  model: () => string | null;
  cluster: () => ClusterView | null;
  slots: number;
}

const TICK_MS = 1000;
const RATE_WINDOW_S = 5;

type Listener = (snapshot: DashboardSnapshot) => void;

/**
 * The snapshots every dashboard stream gets: one timer for all subscribers, running only
 * while there is one (so that a server nobody watches has no timer, and the last client
 * leaving stops it). The token rate is the generated-token counter's rise between samples
 * taken at the ticks.
 */
export class DashboardFeed {
  private readonly listeners = new Set<Listener>();
  private timer: ReturnType<typeof setInterval> | undefined;
  /** Counter samples within the rate window, oldest first. */
  private samples: { atMs: number; generated: number }[] = [];

  constructor(private readonly sources: DashboardSources) {}

  /** Streams open now. */
  get subscribers(): number {
    return this.listeners.size;
  }

  /** Whether the once-a-second timer runs (it does exactly while there are subscribers). */
  get ticking(): boolean {
    return this.timer !== undefined;
  }

  /** Calls `listener` with a snapshot now and then each second; returns the unsubscribe. */
  subscribe(listener: Listener): () => void {
    this.listeners.add(listener);
    listener(this.snapshot());
    this.timer ??= setInterval(() => this.tick(), TICK_MS);
    return () => {
      this.listeners.delete(listener);
      if (this.listeners.size === 0) this.stopTimer();
    };
  }

  /** Drops every subscriber and the timer (the server is closing). */
  close(): void {
    this.listeners.clear();
    this.stopTimer();
  }

  snapshot(nowMs = Date.now()): DashboardSnapshot {
    const m = this.sources.metrics;
    this.sample(nowMs, m.generatedTokens);
    const first = this.samples[0] as { atMs: number; generated: number };
    const spanS = (nowMs - first.atMs) / 1000;
    const s = m.schedulerState();
    return {
      at_ms: nowMs,
      status: this.sources.status(),
      model: this.sources.model(),
      generated_tokens_total: m.generatedTokens,
      prompt_tokens_total: m.promptTokens,
      tokens_per_s: spanS > 0 ? (m.generatedTokens - first.generated) / spanS : 0,
      rate_window_s: RATE_WINDOW_S,
      recent_ttfts: m.recentTtfts().map((t) => ({ at_ms: t.atMs, ttft_s: t.ttftS })),
      queue_depth: s?.queueDepth ?? 0,
      running: s?.activeSlots ?? 0,
      slots: s?.slotCount ?? this.sources.slots,
      cluster: this.sources.cluster(),
    };
  }

  private sample(atMs: number, generated: number): void {
    this.samples.push({ atMs, generated });
    const oldest = atMs - RATE_WINDOW_S * 1000;
    while (this.samples.length > 1 && (this.samples[0] as { atMs: number }).atMs < oldest)
      this.samples.shift();
  }

  private tick(): void {
    const snapshot = this.snapshot();
    for (const listener of this.listeners) listener(snapshot);
  }

  private stopTimer(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }
}
