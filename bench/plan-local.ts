// `tandem bench plan`: the forecast of `tandem plan` for this machine (after a calibration on
// the same threads) beside what `tandem bench model` measures on the same file, in alternated
// rounds. The goal (docs/plan.md): within 15%. With --nodes: plan-cluster.ts.
import { calibrate } from '../src/cluster/calibrate.js';
import {
  bytesFromGguf,
  findEngine,
  findLink,
  forecastSplit,
  parseForecastMachines,
  prefillShapeOf,
  type Calibration,
  type ModelBytes,
} from '../src/parallel/index.js';
import { benchModel } from './model.js';
import {
  atRange,
  bracketed,
  figures,
  figureTable,
  probeRate,
  summarize,
  type Figure,
  type PlanFigures,
  type Round,
} from './plan-rounds.js';

export interface PlanCheckRow extends PlanFigures {
  threads: number;
  figure: Figure;
}

/** One process on this machine, as `bench model` runs it. */
function forecastThis(
  model: ModelBytes,
  c: Calibration,
  o: { promptTokens: number; tokens: number },
): Record<Figure, number> {
  return forecastSplit({
    model,
    machines: parseForecastMachines('this', c),
    link: findLink('10gbe'),
    engine: findEngine('tandem-cpu'),
    parallel: 'tp',
    promptTokens: o.promptTokens,
    context: o.promptTokens + o.tokens,
  });
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
    const rounds: Record<Figure, Round[]> = { decode_tok_s: [], prefill_tok_s: [] };
    let fastest = 0;
    for (let round = 1; round <= o.rounds; round++) {
      o.log(`threads ${threads}, round ${round}/${o.rounds}: calibrating...`);
      const before = await calibrate({ threads, prefill: prefillShapeOf(model, o.promptTokens) });
      if (before.decodeLayerShare !== undefined)
        o.log(
          `decode probe: the layers stream at ${before.decodeLayerShare.toFixed(3)} of the stream probe's ` +
            `${(before.decodeBytesPerS / 1e9).toFixed(1)} GB/s; ${before.layerOverheadMs.toFixed(3)} ms a layer beyond ` +
            `the weights, ${(before.stepOverheadMs ?? 0).toFixed(3)} ms a step, ${(before.decodeCallsPerLayer ?? 0).toFixed(1)} kernel calls a layer`,
        );
      if (before.prefillThreadScaling !== undefined)
        o.log(
          `the prefill probe's speedup on ${threads} threads over 1: ${before.prefillThreadScaling.toFixed(2)}x`,
        );
      o.log(`threads ${threads}, round ${round}/${o.rounds}: bench model...`);
      const { rows: m } = await benchModel({
        model: o.model,
        threads,
        promptTokens: o.promptTokens,
        tokens: o.tokens,
        llamaCpp: false,
        timeoutMs: 600_000,
      });
      const c = await bracketed(before);
      fastest = Math.max(fastest, c.decodeBytesPerSRange![1]);
      const range = atRange(c);
      const [f, low, high] = [c, range.low, range.high].map((x) => forecastThis(model, x, o));
      for (const figure of figures)
        rounds[figure].push({
          predicted: f![figure],
          low: low![figure],
          high: high![figure],
          measured: m[0]![figure],
          probe: probeRate(c),
        });
    }
    for (const figure of figures) rows.push({ threads, figure, ...summarize(rounds[figure], fastest) });
  }
  return rows;
}

export function planCheckTable(rows: readonly PlanCheckRow[]): string {
  return figureTable(
    ['threads', 'figure'],
    'bench model',
    rows.map((r) => [[String(r.threads), r.figure], r]),
  );
}
