/**
 * How long a completion-queue wait busy-polls before it sleeps.
 *
 * Spinning only pays when frames come soon and the peer that produces them has a core to run
 * on. So the window (counted from the last time frames moved) is twice the average quiet
 * spell this queue's waits saw before frames moved, between MIN_SPIN_US and MAX_SPIN_US; it
 * is 0 when that average exceeds MAX_SPIN_US (spinning would only burn the core). One in
 * PROBE_EVERY decisions spins anyway, so the average can come back down.
 *
 * Whether to spin at all is the caller's static decision (WaitOptions.spin), as in MPI: a job
 * that runs more busy processes on a host than it has cores must not spin (a spinner takes
 * the timeslices of the very process it waits for: 3 spinners on 2 cores cost milliseconds per
 * barrier). No dynamic load test decides it: /proc/loadavg's runnable count and a thread's
 * run-queue wait both read "overloaded" for two ranks on two cores, because V8 runs GC and
 * compiler threads beside each main thread, so spinning would stop at random and a 2-rank
 * all-reduce would take several times longer (docs/fabric.md, "Waiting").
 * `TANDEM_FABRIC_SPIN_US` fixes the window (0: never spin), e.g. for benchmarks.
 */
export const MAX_SPIN_US = 200;
const MIN_SPIN_US = 5;
/** Longer quiet spells count as this long (one long sleep must not end spinning for good). */
const CLIP_US = 2 * MAX_SPIN_US;
/** Weight of the newest wait in the running average. */
const ALPHA = 0.125;
const PROBE_EVERY = 32;

function fixedFromEnv(): number | undefined {
  const v = process.env.TANDEM_FABRIC_SPIN_US;
  if (v === undefined || v.trim() === '') return undefined;
  const n = Number(v);
  return Number.isFinite(n) && n >= 0 ? n : 0;
}

const fixedUs = fixedFromEnv();

export class SpinPolicy {
  /** Running average of the quiet spells before frames moved, in us (clipped at CLIP_US). */
  private avgUs = 0;
  private seen = 0;
  private asked = 0;

  constructor(private readonly fixed: number | undefined = fixedUs) {}

  /** The spin window (after the last activity) for the next stretch of a wait, in ms. */
  windowMs(): number {
    if (this.fixed !== undefined) return this.fixed / 1000;
    if (this.avgUs > MAX_SPIN_US && ++this.asked % PROBE_EVERY !== 0) return 0;
    return Math.min(MAX_SPIN_US, Math.max(MIN_SPIN_US, 2 * this.avgUs)) / 1000;
  }

  /** Frames moved after a quiet spell of `us` microseconds (spinning or asleep). */
  record(us: number): void {
    const clipped = Math.min(us, CLIP_US);
    this.avgUs = this.seen++ === 0 ? clipped : this.avgUs + ALPHA * (clipped - this.avgUs);
  }

  get averageUs(): number {
    return this.avgUs;
  }
}
