// The rounds of `tandem bench plan`: each round forecasts from stream samples taken right
// before and right after its run (so the probe sees the VM in the mode the run saw), and the
// summary says, for every round, which mode the probe and the run were in.
import { median } from '../src/cluster/calibrate-twin.js';
import { FAST_MODE_SHARE, streamSamples, withStreamSamples } from '../src/cluster/calibrate.js';
import type { Calibration } from '../src/parallel/index.js';
import { formatTable } from './table.js';

/** Stream samples taken right before and right after a run. */
export const BRACKET_SAMPLES = 4;

export type Figure = 'decode_tok_s' | 'prefill_tok_s';
export const figures: readonly Figure[] = ['decode_tok_s', 'prefill_tok_s'];

/** One round of one case: the forecast (at the samples' median, slowest and fastest) and the run. */
export interface Round {
  predicted: number;
  low: number;
  high: number;
  measured: number;
  /** The samples' median, bytes a second: which mode the probe caught. */
  probe: number;
}

/** A case's result over its rounds. */
export interface PlanFigures {
  /** The best round's forecast and the best run (the forecast of the fastest probe, the fastest run). */
  predicted: number;
  measured: number;
  /** predicted / measured - 1 */
  error: number;
  /** The forecast at the slowest and the fastest stream sample of any round. */
  predicted_low: number;
  predicted_high: number;
  /** Each round's forecast against its own run: predicted / measured - 1. */
  round_errors: number[];
  /**
   * The best run against the range of the forecasts (predicted_low to predicted_high): 0 inside
   * it, else the nearer end / measured - 1 (the goal: within 15%).
   */
  range_error: number;
  /** Each round's run against that round's own range, likewise. */
  round_range_errors: number[];
  /** Each round's modes, probe/run: `fast` within FAST_MODE_SHARE of the fastest seen, else `slow`. */
  modes: string[];
}

/**
 * The calibration `c` as the run saw the machine: its decode rate from `beforeRun` (samples
 * taken right before the run; by default the calibration's own) and BRACKET_SAMPLES more
 * taken now, after it; its prefill GEMM rate the calibration's compute per stream byte
 * (measured in pairs, each in one mode) times that rate, and the prefill's other terms moved
 * in the same ratio.
 */
export async function bracketed(c: Calibration, beforeRun?: readonly number[]): Promise<Calibration> {
  const after = await streamSamples(c.threads, BRACKET_SAMPLES);
  const samples = [...(beforeRun ?? c.streamSamples ?? [c.decodeBytesPerS]), ...after];
  const ratio = c.prefillFlopsPerStreamByte;
  return withStreamSamples(
    ratio === undefined ? c : prefillScaled(c, (ratio * median(samples)) / c.prefillFlopsPerS),
    samples,
  );
}

/** `c` with its prefill moved by `k`: the FLOP/s times k, the per-token fixed cost over k. */
function prefillScaled(c: Calibration, k: number): Calibration {
  return {
    ...c,
    prefillFlopsPerS: c.prefillFlopsPerS * k,
    ...(c.prefillAttentionFlopsPerS !== undefined
      ? { prefillAttentionFlopsPerS: c.prefillAttentionFlopsPerS * k }
      : {}),
    ...(c.prefillLayerTokenMs !== undefined ? { prefillLayerTokenMs: c.prefillLayerTokenMs / k } : {}),
  };
}

/** `c` with every rate moved by rate / c.decodeBytesPerS (the fixed costs by its inverse). */
function scaledTo(c: Calibration, rate: number): Calibration {
  const k = rate / c.decodeBytesPerS;
  return {
    ...prefillScaled(c, k),
    decodeBytesPerS: rate,
    layerOverheadMs: c.layerOverheadMs / k,
    ...(c.stepOverheadMs !== undefined ? { stepOverheadMs: c.stepOverheadMs / k } : {}),
  };
}

/**
 * The calibration at its slowest and its fastest stream sample: the forecast's range. The VM's
 * modes move compute with the memory stream, so every rate takes the stream's ratio (the fixed
 * costs its inverse).
 */
export function atRange(c: Calibration): { low: Calibration; high: Calibration } {
  const [lo, hi] = c.decodeBytesPerSRange ?? [c.decodeBytesPerS, c.decodeBytesPerS];
  return { low: scaledTo(c, lo), high: scaledTo(c, hi) };
}

/** `measured` against the range [low, high]: 0 inside it, else the nearer end / measured - 1. */
export function rangeError(measured: number, low: number, high: number): number {
  return Math.min(Math.max(measured, low), high) / measured - 1;
}

/** Sums up a case's rounds; `fastest` is the fastest stream sample of the whole run at these threads. */
export function summarize(rounds: readonly Round[], fastest: number): PlanFigures {
  const predicted = Math.max(...rounds.map((r) => r.predicted));
  const measured = Math.max(...rounds.map((r) => r.measured));
  const mode = (fast: boolean): string => (fast ? 'fast' : 'slow');
  const low = Math.min(...rounds.map((r) => r.low));
  const high = Math.max(...rounds.map((r) => r.high));
  return {
    predicted,
    measured,
    error: predicted / measured - 1,
    predicted_low: low,
    predicted_high: high,
    round_errors: rounds.map((r) => r.predicted / r.measured - 1),
    range_error: rangeError(measured, low, high),
    round_range_errors: rounds.map((r) => rangeError(r.measured, r.low, r.high)),
    modes: rounds.map(
      (r) =>
        `${mode(r.probe >= FAST_MODE_SHARE * fastest)}/${mode(r.measured >= FAST_MODE_SHARE * measured)}`,
    ),
  };
}

/** The probe's median over its samples (for a calibration without them, its rate). */
export function probeRate(c: Calibration): number {
  return c.streamSamples ? median(c.streamSamples) : c.decodeBytesPerS;
}

const pct = (e: number): string => `${e >= 0 ? '+' : ''}${(e * 100).toFixed(1)}%`;

/** The table's columns for a case's figures, after the columns that name it. */
export function figureTable(
  head: readonly string[],
  measuredBy: string,
  rows: [string[], PlanFigures][],
): string {
  return formatTable(
    [
      ...head,
      'predicted (range)',
      `measured (${measuredBy})`,
      'error',
      'vs range',
      'rounds: probe/run mode, error, vs its range',
    ],
    rows.map(([names, f]) => [
      ...names,
      `${f.predicted.toFixed(1)} (${f.predicted_low.toFixed(1)}-${f.predicted_high.toFixed(1)})`,
      f.measured.toFixed(1),
      pct(f.error),
      pct(f.range_error),
      f.modes.map((m, i) => `${m} ${pct(f.round_errors[i]!)} ${pct(f.round_range_errors[i]!)}`).join(', '),
    ]),
  );
}
