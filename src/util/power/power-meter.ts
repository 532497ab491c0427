/**
 * What a platform's power reader gives: the energy the machine has used since the meter was
 * opened. Every reader covers the whole machine (or its CPU package), not this process alone:
 * RAPL and powermetrics measure hardware, and other programs' work is in the figure.
 */
export interface PowerMeter {
  /** Where the figure comes from, for people: `RAPL package-0 + package-1`, `powermetrics`. */
  readonly source: string;
  /**
   * Joules used since the meter was opened; never decreases. A reader whose counter wraps
   * (RAPL) must be read at least once per wrap period (minutes at full load) to stay exact.
   */
  joules(): number;
  /** Releases what the meter holds (a child process). */
  close(): void;
}

/** A meter, or why none could be opened (shown once by the bench commands and the dashboard). */
export type PowerProbe = { meter: PowerMeter; reason?: undefined } | { meter?: undefined; reason: string };

/** Joules per token, or undefined when nothing was generated (no token to charge). */
export function joulesPerToken(joules: number, tokens: number): number | undefined {
  return tokens > 0 ? joules / tokens : undefined;
}
