import type { LinkSpec } from './links.js';
import type { Calibration } from './machine-list.js';
import { calibratedRates, thisMachine } from './machine-list.js';
import type { ForecastMachine, ForecastRates } from './predict.js';

/**
 * N nodes of T threads each on ONE host, as `tandem bench cluster` runs them: separate
 * processes that share the host's memory bandwidth and cores. Each node's rates are the
 * lesser of what one node alone gets (`perNode`, calibrated at T threads) and its 1/N share
 * of what the host gives all of them at once (`together`, calibrated at min(N x T, cores)
 * threads: the bandwidth N streams reach together, and the compute of the cores they share;
 * `bench plan` takes its decode rate from N processes streaming at once where their ranks
 * stream at the same time).
 * Where N x T exceeds the cores, the nodes take turns: between two exchanges every node must
 * finish its share before any goes on, and a node's threads run on cores of their own, so the
 * share runs in rounds (lockstepRounds): floor(cores / T) nodes at a time, the last round
 * with the rest. A node's rate is then its share over the rounds' times, each round at the
 * rate of as many nodes as run in it, and the fixed costs (a layer's and a step's calls and
 * waits, the prefill's per-token work) are paid once a round. Only nodes that compute at the
 * same time share: the stages of a pipeline running one sequence take turns (`concurrent`
 * false), so each streams at what one node alone gets.
 */
export function sharedHostMachines(o: {
  nodes: number;
  perNode: Calibration;
  together: Calibration;
  cores: number;
  concurrent: boolean;
  /** ms a tensor-parallel exchange of these nodes costs beyond the link (measured; see ForecastRates). */
  exchangeMs?: number;
  /** The same between a prefill's longer chunks (see ForecastRates). */
  prefillExchangeMs?: number;
}): ForecastMachine[] {
  const { nodes: n, perNode } = o;
  const together = o.concurrent
    ? o.together
    : {
        ...perNode,
        decodeBytesPerS: Infinity,
        prefillFlopsPerS: Infinity,
        prefillAttentionFlopsPerS: Infinity,
      };
  const spec = thisMachine(perNode);
  const rounds = o.concurrent ? lockstepRounds(n, perNode.threads, o.cores) : [n];
  // a node's rate over its rounds: k nodes at once each get the lesser of one node's rate and their share of the host's
  const inRound = (alone: number, all: number, k: number): number => Math.min(alone, all / k);
  const inRounds = (alone: number, all: number): number =>
    rounds.length === 1
      ? inRound(alone, all, rounds[0]!)
      : 1 / rounds.reduce((t, k) => t + 1 / inRound(alone, all, k), 0);
  const own = calibratedRates(perNode);
  const turns = rounds.length;
  const rates: ForecastRates = {
    decodeBytesPerS: inRounds(perNode.decodeBytesPerS, together.decodeBytesPerS),
    prefillFlopsPerS: inRounds(perNode.prefillFlopsPerS, together.prefillFlopsPerS),
    layerOverheadMs: own.layerOverheadMs * turns,
    stepOverheadMs: own.stepOverheadMs! * turns,
    decodeLayerShare: own.decodeLayerShare!,
    prefillLayerTokenMs: own.prefillLayerTokenMs! * turns,
    wakeMs: own.wakeMs!,
    ...(o.exchangeMs !== undefined ? { exchangeMs: o.exchangeMs } : {}),
    ...(o.prefillExchangeMs !== undefined ? { prefillExchangeMs: o.prefillExchangeMs } : {}),
    ...(own.prefillAttentionFlopsPerS !== undefined
      ? {
          prefillAttentionFlopsPerS: inRounds(
            own.prefillAttentionFlopsPerS,
            together.prefillAttentionFlopsPerS ?? Infinity,
          ),
        }
      : {}),
    ...(own.prefillWidth !== undefined ? { prefillWidth: own.prefillWidth } : {}),
  };
  const memory = { gb: perNode.memoryBytes / 1e9 / n, bandwidthGBs: rates.decodeBytesPerS / 1e9 };
  return Array.from({ length: n }, (_, i) => ({
    name: n > 1 ? `this-node-${i + 1}` : 'this-node',
    spec,
    memory,
    rates,
  }));
}

/**
 * How `nodes` nodes of `threads` threads each that must all finish before any goes on share
 * `cores` cores: the nodes running in each round, floor(cores / threads) at a time (at least
 * one), the last round the rest. [nodes] where they all fit at once.
 */
export function lockstepRounds(nodes: number, threads: number, cores: number): number[] {
  const at = Math.max(1, Math.floor(cores / threads));
  const rounds: number[] = [];
  for (let left = nodes; left > 0; left -= at) rounds.push(Math.min(at, left));
  return rounds;
}

/**
 * A pipeline's prefill on one host, ms, from its forecast with every stage alone on the host
 * (`aloneMs`) and with all of them computing at once (`togetherMs`). Its `pieces`
 * micro-batches pass `stages` stages in stages + pieces - 1 slots, and in slot k only
 * a_k = min(k + 1, stages, pieces, stages + pieces - 1 - k) stages compute (3 stages of 4
 * pieces: 1, 2, 3, 3, 2, 1). The host gives all stages together `stages` x the together rate,
 * so a_k stages each get min(1, stages x together / (a_k x alone)) of a stage's own rate: a
 * slot takes a piece's time alone stretched by max(1, a_k x slowdown / stages), where
 * slowdown = togetherMs / aloneMs. Stages of equal time (as bench cluster's nodes are).
 */
export function pipelinePrefillMs(o: {
  stages: number;
  pieces: number;
  aloneMs: number;
  togetherMs: number;
}): number {
  const { stages: s, pieces: m } = o;
  const slots = s + m - 1;
  const slowdown = Math.max(1, o.togetherMs / o.aloneMs);
  let stretched = 0;
  for (let k = 0; k < slots; k++) {
    const active = Math.min(k + 1, s, m, slots - k);
    stretched += Math.max(1, (active * slowdown) / s);
  }
  return (o.aloneMs / slots) * stretched;
}

/**
 * The link between processes on this host as a collective over it measured: `smallUs`, the
 * time of one all-reduce of a decode step's activations over two ranks (a single step of the
 * forecast's all-reduce, software included), and the bandwidth of a large one.
 */
export function measuredLink(o: {
  provider: string;
  smallUs: number;
  largeBytes: number;
  largeUs: number;
}): LinkSpec {
  // an all-reduce of S bytes over 2 ranks moves S each way: its time is S / bandwidth plus a step
  const bandwidthGBs = o.largeBytes / Math.max(1e-3, o.largeUs - o.smallUs) / 1e3;
  return {
    id: `local-${o.provider}`,
    name: `${o.provider} between processes on this host (measured)`,
    latencyUs: o.smallUs,
    bandwidthGBs,
    source: `tandem bench collectives --provider ${o.provider} (2 ranks), in the same run`,
  };
}
