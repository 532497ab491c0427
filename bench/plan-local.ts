// `tandem bench plan`: the forecast of `tandem plan` for this machine (after a calibration on
// the same threads) beside what `tandem bench model` measures on the same file, and with
// --nodes the forecast for local nodes beside `tandem bench cluster`, in alternated rounds,
// best of each. The goal (docs/plan.md): within 15%.
import { availableParallelism } from 'node:os';
import { benchCluster } from '../src/cluster/bench.js';
import { calibrate } from '../src/cluster/calibrate.js';
import { runCollectivesBench } from '../src/collectives/bench.js';
import type { ProviderName } from '../src/fabric/index.js';
import {
  bytesFromGguf,
  findEngine,
  findLink,
  forecastSplit,
  measuredLink,
  parseForecastMachines,
  sharedHostMachines,
  type LinkSpec,
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

/** One configuration of local nodes: the forecast for this host beside `bench cluster`'s figures. */
export interface PlanClusterRow {
  nodes: number;
  parallel: 'tp' | 'pp';
  provider: ProviderName;
  figure: 'decode_tok_s' | 'prefill_tok_s';
  predicted: number;
  measured: number;
  /** predicted / measured - 1 */
  error: number;
}

/** A 2-rank all-reduce of `bytes` and of 1 MiB over `provider`: the local link as the forecast sees it. */
async function measureLocalLink(provider: ProviderName, bytes: number): Promise<LinkSpec> {
  const large = 1 << 20;
  const rows = await runCollectivesBench(
    { op: 'all-reduce', ranks: 2, provider, sizes: [bytes, large] },
    () => {},
  );
  const at = (b: number): number =>
    rows.find((r) => r.bytes === b)?.p50_us ?? rows.find((r) => r.bytes === b)!.time_us;
  return measuredLink({ provider, smallUs: at(bytes), largeBytes: large, largeUs: at(large) });
}

/**
 * `tandem bench plan --nodes N`: for each parallel kind and provider, the forecast for N nodes
 * of `threads` on this host (they share its bandwidth and cores: sharedHostMachines; the link
 * measured by a 2-rank all-reduce in the same run) beside what `tandem bench cluster` measures
 * with the same nodes; the 1-node row of each bench cluster run checks the single-node forecast
 * on the same process layout. Rounds alternate; the best of each is kept.
 */
export async function benchPlanCluster(o: {
  model: string;
  nodes: number;
  threads: number;
  parallel: readonly ('tp' | 'pp')[];
  providers: readonly ProviderName[];
  rounds: number;
  promptTokens: number;
  tokens: number;
  log: (line: string) => void;
}): Promise<PlanClusterRow[]> {
  const model = bytesFromGguf(o.model);
  const cores = availableParallelism();
  const best = new Map<string, { predicted: number; measured: number }>();
  const keep = (key: string, predicted: number, measured: number): void => {
    const b = best.get(key);
    best.set(key, {
      predicted: Math.max(b?.predicted ?? 0, predicted),
      measured: Math.max(b?.measured ?? 0, measured),
    });
  };
  for (let round = 1; round <= o.rounds; round++) {
    o.log(`round ${round}/${o.rounds}: calibrating at ${o.threads} and ${o.nodes * o.threads} threads...`);
    const perNode = await calibrate({ threads: o.threads });
    const together = await calibrate({ threads: Math.min(cores, o.nodes * o.threads) });
    for (const provider of o.providers) {
      o.log(`round ${round}/${o.rounds}: the ${provider} link...`);
      const link = await measureLocalLink(provider, model.hidden * 4);
      for (const parallel of o.parallel) {
        const forecast = (nodes: number): { decode_tok_s: number; prefill_tok_s: number } =>
          forecastSplit({
            model,
            // a pipeline's stages take turns on one sequence; tensor-parallel ranks work at once
            machines: sharedHostMachines({ nodes, perNode, together, cores, concurrent: parallel === 'tp' }),
            link,
            engine: findEngine('tandem-cpu'),
            parallel,
            promptTokens: o.promptTokens,
            context: o.promptTokens + o.tokens,
          });
        o.log(
          `round ${round}/${o.rounds}: bench cluster --nodes ${o.nodes} --parallel ${parallel} --provider ${provider}...`,
        );
        const measured = await benchCluster({
          model: o.model,
          nodes: o.nodes,
          parallel,
          provider,
          threads: o.threads,
          promptTokens: o.promptTokens,
          tokens: o.tokens,
          repeat: 1,
          ceiling: false,
        });
        for (const row of measured) {
          const f = forecast(row.nodes);
          for (const figure of ['decode_tok_s', 'prefill_tok_s'] as const)
            keep(`${row.nodes}|${parallel}|${provider}|${figure}`, f[figure], row[figure]);
        }
      }
    }
  }
  return [...best].map(([key, b]) => {
    const [nodes, parallel, provider, figure] = key.split('|') as [
      string,
      'tp' | 'pp',
      ProviderName,
      PlanClusterRow['figure'],
    ];
    return { nodes: Number(nodes), parallel, provider, figure, ...b, error: b.predicted / b.measured - 1 };
  });
}

export function planClusterTable(rows: readonly PlanClusterRow[]): string {
  return formatTable(
    ['nodes', 'parallel', 'provider', 'figure', 'predicted', 'measured (bench cluster)', 'error'],
    rows.map((r) => [
      String(r.nodes),
      r.parallel,
      r.provider,
      r.figure,
      r.predicted.toFixed(1),
      r.measured.toFixed(1),
      `${r.error >= 0 ? '+' : ''}${(r.error * 100).toFixed(1)}%`,
    ]),
  );
}
