import type { ProviderName } from '../collectives/index.js';
import { formatBytes } from './memory.js';
import type { ParallelKind } from './plan.js';
import {
  placeModel,
  tryPlace,
  type ModelInfo,
  type NodeSpec,
  type Placement,
  type PlaceOptions,
} from './placement.js';

/**
 * `--parallel auto`: the split whose decode step the cost model below says is shortest,
 * among those that fit the nodes' memory. The model: a decode step reads each rank's weights
 * once, at a nominal bandwidth scaled by the node's relative speed; ranks of one stage work at
 * once (the slowest sets the pace), stages one after another; every collective a step needs
 * (two all-reduces a layer for tensor parallel; attention's all-reduce and the experts' outputs'
 * all-gather a layer for expert parallel; a hand-off between stages) costs the provider's
 * latency. It ranks splits; it does not predict tokens/s. On a small model the collectives'
 * latency outweighs the halved reads, and it prefers the pipeline: the same verdict the demo's
 * measurements give (a split does not pay).
 */

/** Bytes per second a node of relative speed 1 reads weights at during decode. */
const NOMINAL_BYTES_PER_S = 20e9;

/**
 * One collective's latency on each provider, in seconds (the order of this VM's measurements,
 * docs/benchmarks.md; rdma, unmeasured on hardware here, taken as shm's order: a NIC hop is a
 * few microseconds).
 */
const LATENCY_S: Record<ProviderName, number> = { loopback: 5e-6, shm: 2e-5, tcp: 1e-4, rdma: 2e-5 };

export interface AutoChoice {
  kind: ParallelKind;
  tpSize?: number;
  placement: Placement;
  /** The cost model's decode step for it, in seconds (see predictStepSeconds). */
  stepSeconds: number;
  /** Why: each candidate's estimate, and the one chosen. */
  reason: string;
}

/**
 * The cost model's decode step of `p` on `nodes` (rank r on nodes[r]), in seconds: a figure to
 * compare placements of one model by (a join's re-plan is judged on it), not a measured time.
 */
export function predictStepSeconds(
  m: ModelInfo,
  p: Placement,
  nodes: readonly NodeSpec[],
  provider: ProviderName | undefined,
): number {
  const { plan } = p;
  // a rank's weights and KV cache (its communication buffers are not read through)
  const read = (r: number): number =>
    (p.bytes[r]! - p.commBytes) / (NOMINAL_BYTES_PER_S * (nodes[r]?.speed ?? 1));
  let compute = 0;
  for (let s = 0; s < plan.stages; s++) {
    let slowest = 0;
    for (const r of plan.ranks) if (r.stage === s) slowest = Math.max(slowest, read(r.rank));
    compute += slowest;
  }
  const latency = LATENCY_S[provider ?? 'tcp'];
  const layers = m.config.blockCount;
  const collectives = (plan.tpSize > 1 ? 2 * layers : 0) + (plan.stages - 1);
  return compute + collectives * latency;
}

/** Chooses tp, pp, ep or hybrid for these nodes (see above); PAR_NO_FIT (tensor parallel's) when none fits. */
export function chooseParallel(
  m: ModelInfo,
  nodes: readonly NodeSpec[],
  o: Omit<PlaceOptions, 'kind'>,
): AutoChoice {
  const candidates: { kind: ParallelKind; tpSize?: number }[] = [{ kind: 'tp' }];
  if (nodes.length > 1) candidates.push({ kind: 'pp' });
  if (m.config.expertCount >= nodes.length && nodes.length > 1) candidates.push({ kind: 'ep' });
  if (nodes.length >= 4 && nodes.length % 2 === 0) candidates.push({ kind: 'hybrid', tpSize: 2 });
  const scored: { kind: ParallelKind; tpSize?: number; placement: Placement; s: number }[] = [];
  const notes: string[] = [];
  for (const c of candidates) {
    let placement: Placement | undefined;
    try {
      placement = tryPlace(m, nodes, { ...o, ...c });
    } catch {
      placement = undefined; // this split is impossible for the model (too many ranks for its heads)
    }
    if (!placement) {
      notes.push(`${c.kind} does not fit`);
      continue;
    }
    const s = predictStepSeconds(m, placement, nodes, o.provider);
    scored.push({ ...c, placement, s });
    notes.push(
      `${c.kind} ~${(s * 1000).toFixed(1)} ms a step (largest rank ${formatBytes(Math.max(...placement.bytes))})`,
    );
  }
  if (scored.length === 0) placeModel(m, nodes, { ...o, kind: 'tp' }); // throws PAR_NO_FIT with the sizes
  const best = scored.reduce((a, b) => (b.s < a.s ? b : a));
  return {
    kind: best.kind,
    ...(best.tpSize !== undefined ? { tpSize: best.tpSize } : {}),
    placement: best.placement,
    stepSeconds: best.s,
    reason: `--parallel auto chose ${best.kind} on ${nodes.length} node(s): ${notes.join('; ')}`,
  };
}
