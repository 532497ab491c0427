import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { ClusterMetrics, type ClusterMetricsSource } from './cluster-metrics.js';
import { EnergyMetrics } from './energy-metrics.js';
import { ExpertMetrics } from './expert-metrics.js';
import type { PowerProbe } from '../util/power/index.js';
import type { RequestOutcome, RequestTrace } from './request-trace.js';

/** What /metrics reads from the scheduler when scraped. */
export interface SchedulerState {
  queueDepth: number;
  activeSlots: number;
  slotCount: number;
}

/** Seconds: CPU serving runs from milliseconds (a tiny model) to minutes (a long answer on a large one). */
const LATENCY_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640];
/** Recent requests whose TTFT the dashboard shows. */
const RECENT_TTFTS = 50;
const TOKEN_GAP_BUCKETS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5, 5,
];

/**
 * The server's metrics in one prom-client registry (Prometheus text, exposition 0.0.4).
 * Names are vLLM's with `tandem:` for `vllm:` where vLLM has the figure (a dashboard built for
 * vLLM works after that one substitution); docs/metrics.md lists every metric and its
 * counterparts in vLLM and llama.cpp. The registry is the server's own, not prom-client's
 * global one, so that servers in one process (tests) keep their counts apart.
 */
export class Metrics {
  readonly registry = new Registry();
  readonly cluster = new ClusterMetrics(this.registry);
  readonly energy = new EnergyMetrics(this.registry, () => this.counts.generated);
  readonly experts = new ExpertMetrics(this.registry);
  private scheduler: () => SchedulerState | undefined = () => undefined;
  private readonly counts = { prompt: 0, cached: 0, generated: 0, cancelled: 0 };
  private readonly ttfts: { atMs: number; ttftS: number }[] = [];

  private readonly httpRequests = this.counter(
    'tandem:http_requests_total',
    'HTTP requests answered, by route ("unknown" for no route) and status.',
    ['route', 'status'],
  );
  private readonly promptTotal = this.counter('tandem:prompt_tokens_total', 'Prompt tokens prefilled.', []);
  private readonly cachedTotal = this.counter(
    'tandem:prompt_tokens_cached_total',
    'Prompt tokens whose K/V a slot held from an earlier prompt (taken, not prefilled).',
    [],
  );
  private readonly generationTotal = this.counter(
    'tandem:generation_tokens_total',
    'Tokens generated (end-of-generation and stop-string tokens included).',
    [],
  );
  private readonly finished = this.counter(
    'tandem:request_success_total',
    'Completions finished, by reason: stop (end of generation or a stop string), length (max_tokens or the context), abort (client gone or server stopping).',
    ['finished_reason'],
  );
  private readonly rejected = this.counter(
    'tandem:request_rejected_total',
    'Requests refused before they ran, to be retried: queue_full (429), loading or shutting_down (503).',
    ['reason'],
  );
  private readonly errors = this.counter(
    'tandem:request_errors_total',
    'Requests answered with an error (status >= 400, or an error event in a stream), by OpenAI error type and code.',
    ['type', 'code'],
  );
  private readonly ttft = this.histogram(
    'tandem:time_to_first_token_seconds',
    'Seconds from the request arriving to its first generated token.',
    LATENCY_BUCKETS,
  );
  private readonly itl = this.histogram(
    'tandem:inter_token_latency_seconds',
    'Seconds between consecutive generated tokens of a request.',
    TOKEN_GAP_BUCKETS,
  );
  private readonly e2e = this.histogram(
    'tandem:e2e_request_latency_seconds',
    'Seconds from a completion request arriving to its end (finished, failed or aborted).',
    LATENCY_BUCKETS,
  );
  private readonly queueTime = this.histogram(
    'tandem:request_queue_time_seconds',
    'Seconds a request waited in the queue for a slot.',
    LATENCY_BUCKETS,
  );

  /** `slots`: what tandem:num_slots says until the scheduler exists. */
  constructor(slots: number) {
    const read = (): SchedulerState | undefined => this.scheduler();
    const gauge = (name: string, help: string, value: (s: SchedulerState | undefined) => number): void =>
      void new Gauge({
        name,
        help,
        registers: [this.registry],
        collect() {
          this.set(value(read()));
        },
      });
    gauge(
      'tandem:num_requests_running',
      'Requests in a slot (prefilling or generating).',
      (s) => s?.activeSlots ?? 0,
    );
    gauge('tandem:num_requests_waiting', 'Requests queued for a slot.', (s) => s?.queueDepth ?? 0);
    gauge('tandem:num_slots', 'Slots: sequences that run at once (--slots).', (s) => s?.slotCount ?? slots);
    for (const r of ['stop', 'length', 'abort']) this.finished.inc({ finished_reason: r }, 0);
  }

  /** Where the running and waiting gauges are read from once the scheduler exists. */
  readScheduler(read: () => SchedulerState | undefined): void {
    this.scheduler = read;
  }

  /** The scheduler's queue and slots now; undefined until the model is loaded. */
  schedulerState(): SchedulerState | undefined {
    return this.scheduler();
  }

  /** The TTFT of the latest requests that reached a first token (at most 50), oldest first. */
  recentTtfts(): readonly { atMs: number; ttftS: number }[] {
    return this.ttfts;
  }

  /** Shows the cluster's members and links on /metrics; see ClusterMetricsSource. */
  setClusterSource(source: ClusterMetricsSource | undefined): void {
    this.cluster.setSource(source);
  }

  /** Shows the machine's power and J/token on /metrics where `probe` has a meter, else why not. */
  setPower(probe: PowerProbe): void {
    this.energy.setProbe(probe);
  }

  // The scheduler adds to these as it works (`metrics.generatedTokens++`); each
  // addition goes to its counter.
  get promptTokens(): number {
    return this.counts.prompt;
  }
  set promptTokens(n: number) {
    this.promptTotal.inc(n - this.counts.prompt);
    this.counts.prompt = n;
  }
  get promptTokensCached(): number {
    return this.counts.cached;
  }
  set promptTokensCached(n: number) {
    this.cachedTotal.inc(n - this.counts.cached);
    this.counts.cached = n;
  }
  get generatedTokens(): number {
    return this.counts.generated;
  }
  set generatedTokens(n: number) {
    this.generationTotal.inc(n - this.counts.generated);
    this.counts.generated = n;
  }
  /** Sequences cut short (client gone, server stopping): finished_reason "abort". */
  get cancelled(): number {
    return this.counts.cancelled;
  }
  set cancelled(n: number) {
    this.finished.inc({ finished_reason: 'abort' }, n - this.counts.cancelled);
    this.counts.cancelled = n;
  }

  countRequest(route: string, status: number): void {
    this.httpRequests.inc({ route, status: String(status) });
  }

  /**
   * A request has ended with `outcome`: its timings go to the histograms (those it reached:
   * a refused request has none), its finish reason and error to the counters. Aborts are
   * counted by the scheduler as they happen (see `cancelled`).
   */
  requestEnded(trace: RequestTrace, outcome: RequestOutcome): void {
    const { queueS, ttftS, totalS } = trace.timings();
    if (queueS !== undefined) this.queueTime.observe(queueS);
    if (ttftS !== undefined) {
      this.ttft.observe(ttftS);
      this.ttfts.push({ atMs: Date.now(), ttftS });
      if (this.ttfts.length > RECENT_TTFTS) this.ttfts.shift();
    }
    for (const gap of trace.gapsS) this.itl.observe(gap);
    // a completion the scheduler took (queued, not refused) has an end-to-end time
    if (trace.queuedMs !== undefined && outcome !== 'rejected' && totalS !== undefined)
      this.e2e.observe(totalS);
    if (outcome === 'stop' || outcome === 'length') this.finished.inc({ finished_reason: outcome });
    const kind = outcome === 'abort' ? undefined : trace.errorKind();
    if (kind) this.errors.inc(kind);
    if (outcome === 'rejected' && kind) this.rejected.inc({ reason: kind.code });
  }

  /** The Prometheus text of every metric, with the cluster's and the meter's read now. */
  async render(): Promise<string> {
    this.cluster.refresh();
    this.energy.refresh();
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  private counter<T extends string>(name: string, help: string, labelNames: readonly T[]): Counter<T> {
    return new Counter<T>({ name, help, labelNames, registers: [this.registry] });
  }

  private histogram(name: string, help: string, buckets: number[]): Histogram {
    return new Histogram({ name, help, buckets, registers: [this.registry] });
  }
}
