// `tandem bench plan`: the forecast of `tandem plan` for this machine (after a calibration on
// the same threads) beside what `tandem bench model` measures on the same file, in
// alternated rounds, best of each. The goal (docs/plan.md): within 15%.
import { calibrate } from '../src/cluster/calibrate.js';
import {
  bytesFromGguf,
  findEngine,
  findLink,
  forecastSplit,
  parseForecastMachines,
} from '../src/parallel/index.js';
import { benchModel } from './model.js';
import { formatTable } from './table.js';

export interface PlanCheckRow {
  threads: number;
  figure: 'decode_tok_s' | 'prefill_tok_s';
  predicted: number;
  measured: number;
  /** predicted / measured - 1 */
  error: number;
}

export async function benchPlanLocal(o: {
  model: string;
  threads: readonly number[];
  rounds: number;
  promptTokens: number;
  tokens: number;
  log: (line: string) => void;
}): Promise<PlanCheckRow[]> {
  const model = bytesFromGguf(o.model);
  const rows: PlanCheckRow[] = [];
  for (const threads of o.threads) {
    let predicted = { decode_tok_s: 0, prefill_tok_s: 0 };
    let measured = { decode_tok_s: 0, prefill_tok_s: 0 };
    for (let round = 1; round <= o.rounds; round++) {
      o.log(`threads ${threads}, round ${round}/${o.rounds}: calibrating...`);
      const c = await calibrate({ threads });
      const f = forecastSplit({
        model,
        machines: parseForecastMachines('this', c),
        link: findLink('10gbe'),
        engine: findEngine('tandem-cpu'),
        parallel: 'tp',
        promptTokens: o.promptTokens,
        context: o.promptTokens + o.tokens,
      });
      predicted = {
        decode_tok_s: Math.max(predicted.decode_tok_s, f.decode_tok_s),
        prefill_tok_s: Math.max(predicted.prefill_tok_s, f.prefill_tok_s),
      };
      o.log(`threads ${threads}, round ${round}/${o.rounds}: bench model...`);
      const { rows: m } = await benchModel({
        model: o.model,
        threads,
        promptTokens: o.promptTokens,
        tokens: o.tokens,
        llamaCpp: false,
        timeoutMs: 600_000,
      });
      measured = {
        decode_tok_s: Math.max(measured.decode_tok_s, m[0]!.decode_tok_s),
        prefill_tok_s: Math.max(measured.prefill_tok_s, m[0]!.prefill_tok_s),
      };
    }
    for (const figure of ['decode_tok_s', 'prefill_tok_s'] as const)
      rows.push({
        threads,
        figure,
        predicted: predicted[figure],
        measured: measured[figure],
        error: predicted[figure] / measured[figure] - 1,
      });
  }
  return rows;
}

export function planCheckTable(rows: readonly PlanCheckRow[]): string {
  return formatTable(
    ['threads', 'figure', 'predicted', 'measured (bench model)', 'error'],
    rows.map((r) => [
      String(r.threads),
      r.figure,
      r.predicted.toFixed(1),
      r.measured.toFixed(1),
      `${r.error >= 0 ? '+' : ''}${(r.error * 100).toFixed(1)}%`,
    ]),
  );
}
