// `tandem bench plan --nodes N`: the forecast for N local nodes beside what `tandem bench
// cluster` measures with the same nodes, its 1-node row checking one node in the same process
// layout; rounds alternate, each forecast from stream samples taken around its own run.
import { availableParallelism } from 'node:os';
import { groupPieces } from '../src/engine/model/leaves.js';
import { benchCluster } from '../src/cluster/bench.js';
import { calibrate, streamSamples, withStreamSamples } from '../src/cluster/calibrate.js';
import { concurrentStreamSamples } from '../src/cluster/calibrate-together.js';
import { measureExchangeMs } from '../src/cluster/calibrate-exchange.js';
import { measureWakeMs } from '../src/cluster/calibrate-wake.js';
import { exchangeSpin } from '../src/cluster/node-agent.js';
import { runCollectivesBench } from '../src/collectives/bench.js';
import { microBatches } from '../src/parallel/micro-batches.js';
import type { ProviderName } from '../src/fabric/index.js';
import {
  allReduceMs,
  bytesFromGguf,
  findEngine,
  forecastSplit,
  measuredLink,
  prefillShapeOf,
  pipelinePrefillMs,
  sharedHostMachines,
  type Calibration,
  type LinkSpec,
  type ModelBytes,
} from '../src/parallel/index.js';
import {
  atRange,
  BRACKET_SAMPLES,
  bracketed,
  figures,
  figureTable,
  probeRate,
  summarize,
  type Figure,
  type PlanFigures,
  type Round,
} from './plan-rounds.js';

/** One configuration of local nodes: the forecast for this host beside `bench cluster`'s figures. */
export interface PlanClusterRow extends PlanFigures {
  nodes: number;
  parallel: 'tp' | 'pp';
  provider: ProviderName;
  figure: Figure;
}

/**
 * A 2-rank all-reduce of `bytes` and of 1 MiB over `provider`: the local link as the forecast
 * sees it. The mean time, not the median: a decode's tokens a second are a mean over its
 * steps, so a collective's stalls (a scavenge, a rank losing its core) count in full.
 */
async function measureLocalLink(provider: ProviderName, bytes: number): Promise<LinkSpec> {
  const large = 1 << 20;
  const rows = await runCollectivesBench(
    { op: 'all-reduce', ranks: 2, provider, sizes: [bytes, large] },
    () => {},
  );
  const at = (b: number): number => rows.find((r) => r.bytes === b)!.time_us;
  return measuredLink({ provider, smallUs: at(bytes), largeBytes: large, largeUs: at(large) });
}

/**
 * What a prefill's tensor-parallel exchange costs beyond the link, ms: `nodes` rank processes
 * of `threads` over `provider` each compute a chunk of `chunkMs` (a rank's share of a layer
 * half of the prompt) and then sum the prompt's activations (`bytes`, f32) as the nodes do
 * (`bench collectives --op tp-exchange`: the direct exchange over shm, its waits spinning as a
 * node's do; the communicator over tcp), as a prefill's layers do; the mean call less what the
 * forecast charges the link for it. On a host with more ranks than cores this holds what the 2-rank link probe cannot: a rank preempted
 * mid-chunk arrives late, and the ranks' copies share the cores they compute on.
 */
async function prefillExchangeMs(o: {
  provider: ProviderName;
  nodes: number;
  threads: number;
  bytes: number;
  chunkMs: number;
  link: LinkSpec;
}): Promise<number> {
  const [row] = await runCollectivesBench(
    {
      op: 'tp-exchange',
      ranks: o.nodes,
      provider: o.provider,
      sizes: [o.bytes],
      computeMs: o.chunkMs,
      spin: exchangeSpin(o.nodes, o.threads),
    },
    () => {},
  );
  const onLink = allReduceMs(o.nodes, o.bytes, o.link, true);
  return Math.max(0, row!.time_us / 1000 - onLink.latency - onLink.wire);
}

interface HostCalibration {
  perNode: Calibration;
  together: Calibration;
  exchangeMs?: number;
  prefillExchangeMs?: number;
}

/**
 * What a tensor-parallel rank computes between two exchanges, ms: half of its share of a
 * layer's decode (2 all-reduces a layer), at the calibration's rates.
 */
function exchangeChunkMs(model: ModelBytes, c: Calibration, nodes: number): number {
  const layerBytes = model.layers.reduce((a, l) => a + l.active, 0) / model.layers.length;
  const readMs = (layerBytes / nodes / (c.decodeBytesPerS * (c.decodeLayerShare ?? 1))) * 1000;
  return (readMs + c.layerOverheadMs) / 2;
}

/**
 * What a tensor-parallel rank computes between two exchanges of a prefill, ms: its share of
 * one node's forecast prefill of the prompt, halved per layer (2 all-reduces a layer).
 */
function prefillChunkMs(
  model: ModelBytes,
  host: HostCalibration,
  at: { nodes: number; link: LinkSpec; promptTokens: number; tokens: number },
): number {
  const one = forecastNodes(model, host, { ...at, nodes: 1, parallel: 'tp' });
  return ((at.promptTokens / one.prefill_tok_s) * 1000) / at.nodes / (2 * model.layers.length);
}

/**
 * The exchange of `nodes` tensor-parallel ranks of `threads` (measureExchangeMs, its waits
 * spinning as the nodes' do); undefined for a pipeline, which has none.
 */
async function exchangeMs(
  parallel: 'tp' | 'pp',
  model: ModelBytes,
  c: Calibration,
  nodes: number,
  threads: number,
): Promise<number | undefined> {
  if (parallel !== 'tp') return undefined;
  const spin = exchangeSpin(nodes, threads);
  return measureExchangeMs({
    ranks: nodes,
    chunkMs: exchangeChunkMs(model, c, nodes),
    ...(typeof spin === 'number' ? { spinMs: spin / 1000 } : {}),
  });
}

/**
 * Stream samples of `nodes` processes of `threads` reading at once (concurrentStreamSamples),
 * for tensor parallel over 2 or more nodes, whose ranks stream at the same time; undefined
 * otherwise (a pipeline's stages take turns).
 */
async function nodesStreaming(
  parallel: 'tp' | 'pp',
  nodes: number,
  threads: number,
): Promise<number[] | undefined> {
  if (parallel !== 'tp' || nodes < 2) return undefined;
  return concurrentStreamSamples(nodes, threads, BRACKET_SAMPLES);
}

/**
 * The host's shared calibration with its decode rate taken from the nodes' own processes
 * streaming at once, before and after the run, where there are such samples: a calibration
 * of one process on nodes x threads threads reads less (its threads meet at every call),
 * and its prefill terms stay.
 */
async function nodesStream(
  together: Calibration,
  before: readonly number[] | undefined,
  o: { nodes: number; threads: number },
): Promise<Calibration> {
  if (before === undefined) return together;
  return withStreamSamples(together, [
    ...before,
    ...(await concurrentStreamSamples(o.nodes, o.threads, BRACKET_SAMPLES)),
  ]);
}

/** The forecast for `nodes` nodes of this host, as bench cluster runs them (an f32 wire). */
function forecastNodes(
  model: ModelBytes,
  host: HostCalibration,
  o: { nodes: number; parallel: 'tp' | 'pp'; link: LinkSpec; promptTokens: number; tokens: number },
): Record<Figure, number> {
  const at = (concurrent: boolean): Record<Figure, number> =>
    forecastSplit({
      model,
      machines: sharedHostMachines({ nodes: o.nodes, ...host, cores: availableParallelism(), concurrent }),
      link: o.link,
      engine: findEngine('tandem-cpu'),
      parallel: o.parallel,
      promptTokens: o.promptTokens,
      context: o.promptTokens + o.tokens,
      wireBytes: 4,
    });
  // tensor-parallel ranks work at once; a pipeline's stages take turns on a decode step and
  // work at once on a prefill's micro-batches, all of them only in the middle slots
  if (o.parallel === 'tp') return at(true);
  const alone = at(false);
  const ms = (f: Record<Figure, number>): number => (o.promptTokens / f.prefill_tok_s) * 1000;
  const prefillMs = pipelinePrefillMs({
    stages: o.nodes,
    pieces: microBatches(o.promptTokens, o.nodes).length,
    aloneMs: ms(alone),
    togetherMs: ms(at(true)),
  });
  return { decode_tok_s: alone.decode_tok_s, prefill_tok_s: (o.promptTokens / prefillMs) * 1000 };
}

/**
 * `tandem bench plan --nodes N`: for each parallel kind and provider, the forecast for N nodes
 * of `threads` on this host (they share its bandwidth and cores: sharedHostMachines; the link
 * measured by a 2-rank all-reduce in the same round) beside what `tandem bench cluster`
 * measures with the same nodes; the 1-node row of each bench cluster run checks the
 * single-node forecast on the same process layout.
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
  const cases = new Map<string, Round[]>();
  let fastest = 0;
  for (let round = 1; round <= o.rounds; round++) {
    const tag = `round ${round}/${o.rounds}`;
    o.log(`${tag}: calibrating at ${o.threads} and ${Math.min(cores, o.nodes * o.threads)} threads...`);
    const prefill = prefillShapeOf(model, o.promptTokens);
    const perNode = await calibrate({ threads: o.threads, prefill });
    const together = await calibrate({ threads: Math.min(cores, o.nodes * o.threads), prefill });
    for (const provider of o.providers) {
      o.log(`${tag}: the ${provider} link...`);
      const link = await measureLocalLink(provider, model.hidden * 4);
      for (const parallel of o.parallel) {
        // the round's calibration may be minutes old by now: the rates come from samples around this run
        const before = {
          perNode: await streamSamples(perNode.threads, BRACKET_SAMPLES),
          together: await streamSamples(together.threads, BRACKET_SAMPLES),
          nodes: await nodesStreaming(parallel, o.nodes, o.threads),
        };
        const wakeBefore = await measureWakeMs();
        const exchangeBefore = await exchangeMs(parallel, model, perNode, o.nodes, o.threads);
        // a prefill's exchanges come after a rank's share of the whole prompt: probed before and after the run
        const linkAt = { nodes: o.nodes, link, promptTokens: o.promptTokens, tokens: o.tokens };
        const probePrefillExchange = async (
          host: HostCalibration,
        ): Promise<{ chunkMs: number; ms: number }> => {
          const chunkMs = prefillChunkMs(model, host, linkAt);
          const ms = await prefillExchangeMs({
            provider,
            nodes: o.nodes,
            threads: o.threads,
            // each rank sends its pieces of the prompt's activations (groupPieces; the forecast charges as many)
            bytes: groupPieces(model.heads, o.nodes) * o.promptTokens * model.hidden * 4,
            chunkMs,
            link,
          });
          return { chunkMs, ms };
        };
        const prefillBefore =
          parallel === 'tp'
            ? await probePrefillExchange({ perNode: { ...perNode, wakeMs: wakeBefore }, together })
            : undefined;
        o.log(`${tag}: bench cluster --nodes ${o.nodes} --parallel ${parallel} --provider ${provider}...`);
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
        // the wake-ups and exchanges right before and right after the run: their means, and
        // each end of the range
        const wakes = [wakeBefore, await measureWakeMs()];
        const wakeMs = (wakeBefore + wakes[1]!) / 2;
        const exchangeAfter = await exchangeMs(parallel, model, perNode, o.nodes, o.threads);
        const exchanges = exchangeBefore === undefined ? [] : [exchangeBefore, exchangeAfter!];
        const exchangeAt = (pick: (xs: number[]) => number): { exchangeMs?: number } =>
          exchanges.length > 0 ? { exchangeMs: pick(exchanges) } : {};
        const host: HostCalibration = {
          perNode: { ...(await bracketed(perNode, before.perNode)), wakeMs },
          together: await nodesStream(await bracketed(together, before.together), before.nodes, o),
          ...exchangeAt((xs) => (xs[0]! + xs[1]!) / 2),
        };
        const prefillAfter = prefillBefore ? await probePrefillExchange(host) : undefined;
        const prefills = prefillBefore && prefillAfter ? [prefillBefore.ms, prefillAfter.ms] : [];
        const chunkMs = prefillAfter?.chunkMs ?? 0;
        const prefillAt = (pick: (xs: number[]) => number): { prefillExchangeMs?: number } =>
          prefills.length > 0 ? { prefillExchangeMs: pick(prefills) } : {};
        Object.assign(
          host,
          prefillAt((xs) => (xs[0]! + xs[1]!) / 2),
        );
        fastest = Math.max(fastest, host.perNode.decodeBytesPerSRange![1]);
        const low: HostCalibration = {
          perNode: { ...atRange(host.perNode).low, wakeMs: Math.max(...wakes) },
          together: atRange(host.together).low,
          ...exchangeAt((xs) => Math.max(...xs)),
          ...prefillAt((xs) => Math.max(...xs)),
        };
        const high: HostCalibration = {
          perNode: { ...atRange(host.perNode).high, wakeMs: Math.min(...wakes) },
          together: atRange(host.together).high,
          ...exchangeAt((xs) => Math.min(...xs)),
          ...prefillAt((xs) => Math.min(...xs)),
        };
        o.log(
          `${tag}: wake-up ${wakes.map((w) => w.toFixed(3)).join(' / ')} ms` +
            (exchanges.length > 0
              ? `, a ${o.nodes}-rank exchange ${exchanges.map((x) => x.toFixed(3)).join(' / ')} ms` +
                `, ${prefills.map((x) => x.toFixed(3)).join(' / ')} ms after a prefill's ${chunkMs.toFixed(1)} ms chunk`
              : '') +
            ' (before / after the run)',
        );
        for (const row of measured) {
          const at = { nodes: row.nodes, parallel, link, promptTokens: o.promptTokens, tokens: o.tokens };
          const [f, lo, hi] = [host, low, high].map((h) => forecastNodes(model, h, at));
          for (const figure of figures) {
            const key = `${row.nodes}|${parallel}|${provider}|${figure}`;
            cases.set(key, [
              ...(cases.get(key) ?? []),
              {
                predicted: f![figure],
                low: lo![figure],
                high: hi![figure],
                measured: row[figure],
                probe: probeRate(host.perNode),
              },
            ]);
          }
        }
      }
    }
  }
  return [...cases].map(([key, rounds]) => {
    const [nodes, parallel, provider, figure] = key.split('|') as [string, 'tp' | 'pp', ProviderName, Figure];
    return { nodes: Number(nodes), parallel, provider, figure, ...summarize(rounds, fastest) };
  });
}

export function planClusterTable(rows: readonly PlanClusterRow[]): string {
  return figureTable(
    ['nodes', 'parallel', 'provider', 'figure'],
    'bench cluster',
    rows.map((r) => [[String(r.nodes), r.parallel, r.provider, r.figure], r]),
  );
}
