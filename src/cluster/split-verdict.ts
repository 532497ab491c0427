import { availableParallelism } from 'node:os';

/** What a split's measurement knows about where it ran, to say why it may not pay. */
export interface SplitFacts {
  /** The N-node decode speed over one node's (best of each, alternated). */
  speedup: number;
  nodes: number;
  /** The N-node run's mean share of each token spent in communication, 0..1. */
  commShare: number;
  /** Whether the nodes are processes on this machine (demo, bench cluster without --hosts). */
  local: boolean;
  /** Threads per node and this machine's cores (local nodes only). */
  threadsPerNode?: number;
  cores?: number;
  /** Bytes of the model file. */
  modelBytes: number;
  /** Timed rounds of each configuration. */
  repeat: number;
}

/** Below this the model's per-token compute is short next to an exchange between processes. */
const SMALL_MODEL_BYTES = 256 * 1024 * 1024;

/**
 * One line saying why an N-node split measured slower than one node (speedup < 1), naming
 * every cause the facts show: nodes that share cores (local processes whose threads exceed the
 * machine's cores compete for them), a model too small for a split to pay (communication takes
 * a large share of each token, or the file is small), and too few rounds for warm, steady
 * figures. Undefined when the split paid.
 */
export function whySplitMayNotPay(f: SplitFacts): string | undefined {
  if (!(f.speedup < 1)) return undefined;
  const reasons: string[] = [];
  const cores = f.cores ?? availableParallelism();
  const threads = f.nodes * (f.threadsPerNode ?? 1);
  if (f.local && threads + (f.threadsPerNode ?? 1) > cores)
    reasons.push(
      `the ${f.nodes} nodes and the reference run ${threads + (f.threadsPerNode ?? 1)} threads on ${cores} core(s) of one machine, so they take turns instead of working at once`,
    );
  else if (f.local)
    reasons.push(`the ${f.nodes} local nodes share one machine's memory bandwidth, which bounds decoding`);
  if (f.commShare >= 0.3 || f.modelBytes < SMALL_MODEL_BYTES)
    reasons.push(
      `the model (${(f.modelBytes / 1048576).toFixed(0)} MiB) is too small for a split to pay: ${(100 * f.commShare).toFixed(0)}% of each token goes to communication, which a split adds and one node does not need`,
    );
  if (f.repeat < 3)
    reasons.push(`${f.repeat} timed round(s) may still include cold nodes (--repeat 3 or more)`);
  if (reasons.length === 0)
    reasons.push('the machine was busy or its speed drifted between rounds; run again with more --repeat');
  return `why the split is slower here (${f.speedup.toFixed(2)}x): ${reasons.join('; ')}.`;
}
