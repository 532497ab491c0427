import { findEngine } from './engines.js';
import { findLink } from './links.js';
import { parseForecastMachines } from './machine-list.js';
import { findModelShape } from './model-catalog.js';
import { bytesFromShape } from './model-bytes.js';
import { forecastSplit } from './predict.js';
import { publishedCases, type PublishedCase } from './published-cases.js';

export interface ValidationRow {
  id: string;
  figure: 'decode_tok_s' | 'prefill_tok_s';
  measured: number;
  predicted: number;
  /** predicted / measured - 1 */
  error: number;
  fitted: boolean;
  source: string;
  note?: string;
}

/** Forecasts each published case and sets it beside the measured figure. */
export function validateForecasts(cases: readonly PublishedCase[] = publishedCases): ValidationRow[] {
  const rows: ValidationRow[] = [];
  for (const c of cases) {
    const f = forecastSplit({
      model: bytesFromShape(findModelShape(c.model), c.quant),
      machines: parseForecastMachines(c.machines),
      link: findLink(c.link),
      engine: findEngine(c.engine),
      parallel: c.parallel,
      promptTokens: c.promptTokens,
      context: 4096,
    });
    for (const figure of ['decode_tok_s', 'prefill_tok_s'] as const) {
      const measured = c.measured[figure];
      if (measured === undefined) continue;
      rows.push({
        id: c.id,
        figure,
        measured,
        predicted: f[figure],
        error: f[figure] / measured - 1,
        fitted: c.fitted === true,
        source: c.source,
        ...(c.note !== undefined ? { note: c.note } : {}),
      });
    }
  }
  return rows;
}

/** Median and largest absolute error of the rows not used for fitting, per figure. */
export function validationSummary(
  rows: readonly ValidationRow[],
  figure: ValidationRow['figure'],
): { cases: number; median: number; max: number } {
  const errs = rows
    .filter((r) => r.figure === figure && !r.fitted)
    .map((r) => Math.abs(r.error))
    .sort((a, b) => a - b);
  const mid = errs.length / 2;
  const median =
    errs.length === 0 ? 0 : errs.length % 2 ? errs[Math.floor(mid)]! : (errs[mid - 1]! + errs[mid]!) / 2;
  return { cases: errs.length, median, max: errs[errs.length - 1] ?? 0 };
}
