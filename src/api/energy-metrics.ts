import { performance } from 'node:perf_hooks';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { PowerMeter, PowerProbe } from '../util/power/index.js';

/** Seconds between the meter's samples: the power and J/token gauges are averages over one window. */
export const ENERGY_WINDOW_S = 5;

const ENERGY_METRICS = [
  'tandem:power_meter_info',
  'tandem:energy_joules_total',
  'tandem:power_watts',
  'tandem:energy_per_generated_token_joules',
];

/**
 * The machine's power on /metrics: energy used, watts and joules per generated token, each over
 * the last window of ENERGY_WINDOW_S; `tandem:power_meter_info` says which meter, or why there
 * is none (and then nothing else is exported). The meter covers the whole machine (RAPL's
 * packages, powermetrics' CPU + GPU + ANE), so other programs' work is in the figures.
 */
export class EnergyMetrics {
  private meter: PowerMeter | undefined;
  private timer: NodeJS.Timeout | undefined;
  private last: { joules: number; tokens: number; atMs: number } | undefined;
  private watts: number | undefined;
  private joulesPerToken: number | undefined;
  private readonly info: Gauge<'source' | 'reason'>;
  private readonly energy = new Counter({
    name: 'tandem:energy_joules_total',
    help: 'Joules the machine used since the server started (whole machine, not this process alone).',
    registers: [],
  });
  private readonly power = new Gauge({
    name: 'tandem:power_watts',
    help: `The machine's mean power over the last ${ENERGY_WINDOW_S} s window, watts.`,
    registers: [],
  });
  private readonly perToken = new Gauge({
    name: 'tandem:energy_per_generated_token_joules',
    help: `Joules the machine used per token generated, over the last ${ENERGY_WINDOW_S} s window in which tokens were generated.`,
    registers: [],
  });

  constructor(
    private readonly registry: Registry,
    private readonly generatedTokens: () => number,
    /** ms on a monotonic clock (tests step their own). */
    private readonly now: () => number = () => performance.now(),
  ) {
    this.info = new Gauge({
      name: 'tandem:power_meter_info',
      help: 'The power meter read (source), or why none is (reason); always 1.',
      labelNames: ['source', 'reason'],
      registers: [],
    });
  }

  /** Starts reading `probe`'s meter every window (the timer does not keep the process alive). */
  setProbe(probe: PowerProbe): void {
    this.stop();
    for (const name of ENERGY_METRICS) this.registry.removeSingleMetric(name);
    this.meter = undefined;
    this.registry.registerMetric(this.info);
    this.info.reset();
    this.info.set({ source: probe.meter?.source ?? '', reason: probe.reason ?? '' }, 1);
    if (!probe.meter) return;
    this.meter = probe.meter;
    this.registry.registerMetric(this.energy);
    this.sample();
    this.timer = setInterval(() => this.sample(), ENERGY_WINDOW_S * 1000).unref();
  }

  /** Stops the sampling; the meter itself belongs to whoever opened it. */
  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Called before each scrape: the energy counter read now, the window gauges as last sampled. */
  refresh(): void {
    if (!this.meter) return;
    const joules = this.read();
    if (joules === undefined) return;
    this.energy.reset();
    this.energy.inc(joules);
    this.showValue(this.power, 'tandem:power_watts', this.watts);
    this.showValue(this.perToken, 'tandem:energy_per_generated_token_joules', this.joulesPerToken);
  }

  /** Sets the gauge and registers it once it has a value (before, it is left out, not shown as 0). */
  private showValue(gauge: Gauge, name: string, value: number | undefined): void {
    if (value === undefined) return;
    gauge.set(value);
    if (!this.registry.getSingleMetric(name)) this.registry.registerMetric(gauge);
  }

  /** Closes a window: the watts and J/token over it. The timer calls it; tests call it to step. */
  sample(): void {
    const joules = this.read();
    if (joules === undefined) return;
    const now = { joules, tokens: this.generatedTokens(), atMs: this.now() };
    const last = this.last;
    this.last = now;
    if (!last || now.atMs <= last.atMs) return;
    this.watts = (now.joules - last.joules) / ((now.atMs - last.atMs) / 1000);
    const tokens = now.tokens - last.tokens;
    if (tokens > 0) this.joulesPerToken = (now.joules - last.joules) / tokens;
  }

  /** The meter's joules; undefined (and the figures kept as they were) if a read failed. */
  private read(): number | undefined {
    try {
      return this.meter?.joules();
    } catch {
      return undefined;
    }
  }
}
