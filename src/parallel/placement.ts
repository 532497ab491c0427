import { TandemError } from '../errors/index.js';
import type { ModelConfig } from '../engine/model/config.js';
import type { TensorEntry } from '../engine/model/model-file.js';
import { fullShard } from '../engine/model/shard.js';
import type { ProviderName } from '../collectives/index.js';
import { commBytes, formatBytes, shardBytes, type MemoryOptions } from './memory.js';
import {
  buildPlan,
  describePlan,
  proportionalCounts,
  type ExpertSets,
  type ParallelKind,
  type ParallelPlan,
} from './plan.js';

/** What the solver knows of a node: its memory cap and relative speed (both optional). */
export interface NodeSpec {
  /** Bytes this node may hold (`--mem-limit`); unlimited when absent. */
  memLimit?: number;
  /** Relative compute speed (e.g. measured tokens/s); 1 when unknown. */
  speed?: number;
}

export interface PlaceOptions extends MemoryOptions {
  kind: ParallelKind;
  /** hybrid: ranks per tensor-parallel group (default 2). */
  tpSize?: number;
  /** The fabric between the nodes: its buffers count against each node's limit (none when absent). */
  provider?: ProviderName;
  /** ep: each node's experts (balanceExperts); default contiguous ranges. */
  expertSets?: ExpertSets;
}

export interface Placement {
  plan: ParallelPlan;
  /** Bytes each rank will hold: its shard, its KV cache and its communication buffers. */
  bytes: number[];
  /** Of those, the communication buffers (the same on every rank). */
  commBytes: number;
  /** The whole model on one node (same accounting). */
  totalBytes: number;
}

export interface ModelInfo {
  config: ModelConfig;
  tensors: ReadonlyMap<string, TensorEntry>;
}

function fits(bytes: readonly number[], nodes: readonly NodeSpec[]): boolean {
  return bytes.every((b, r) => b <= (nodes[r]?.memLimit ?? Infinity));
}

function comm(nodes: number, tpSize: number, o: PlaceOptions): number {
  return o.provider ? commBytes({ nodes, tpSize }, o.provider) : 0;
}

function sizes(m: ModelInfo, plan: ParallelPlan, buffers: number, o: PlaceOptions): number[] {
  return plan.ranks.map((r) => shardBytes(m.config, m.tensors, r.shard, o) + buffers);
}

/**
 * Pipeline layer counts: proportional to each stage's speed, then moved off stages over
 * their memory onto stages with room. Undefined when the layers cannot fit at all.
 */
function stageCounts(
  m: ModelInfo,
  nodes: readonly NodeSpec[],
  o: PlaceOptions,
  tpSize: number,
): number[] | undefined {
  const L = m.config.blockCount;
  const stages = nodes.length / tpSize;
  const group = (s: number): NodeSpec[] => nodes.slice(s * tpSize, (s + 1) * tpSize);
  const speed = Array.from({ length: stages }, (_, s) => Math.min(...group(s).map((n) => n.speed ?? 1)));
  let counts = proportionalCounts(L, speed);
  const base = buildPlan(m.config, m.tensors, {
    kind: o.kind,
    nodes: nodes.length,
    ...(o.tpSize ? { tpSize: o.tpSize } : {}),
    stageLayers: counts,
  });
  // Per-stage bytes are affine in the layer count: fixed part (embed, head, buffers) + layers x per-layer part.
  const buffers = comm(nodes.length, tpSize, o);
  const cap = Array.from({ length: stages }, (_, s) => {
    let best = Infinity;
    for (let t = 0; t < tpSize; t++) {
      const r = base.ranks[s * tpSize + t]!;
      const one = shardBytes(m.config, m.tensors, { ...r.shard, layers: { start: 0, end: 1 } }, o);
      const none = shardBytes(m.config, m.tensors, { ...r.shard, layers: { start: 0, end: 0 } }, o);
      const limit = (nodes[s * tpSize + t]?.memLimit ?? Infinity) - buffers;
      best = Math.min(best, Math.floor((limit - none) / Math.max(1, one - none)));
    }
    return best;
  });
  if (cap.some((x) => x < 1) || cap.reduce((a, b) => a + b, 0) < L) return undefined;
  counts = counts.map((c, s) => Math.min(c, cap[s]!));
  let left = L - counts.reduce((a, b) => a + b, 0);
  while (left > 0) {
    // The stage with room whose time per token grows least by one more layer.
    let pick = -1;
    for (let s = 0; s < stages; s++) {
      if (
        counts[s]! < cap[s]! &&
        (pick < 0 || (counts[s]! + 1) / speed[s]! < (counts[pick]! + 1) / speed[pick]!)
      )
        pick = s;
    }
    counts[pick]!++;
    left--;
  }
  return counts;
}

export function tryPlace(m: ModelInfo, nodes: readonly NodeSpec[], o: PlaceOptions): Placement | undefined {
  const total = shardBytes(m.config, m.tensors, fullShard(m.config), o);
  const tpSize = o.kind === 'pp' ? 1 : o.kind === 'hybrid' ? (o.tpSize ?? 2) : nodes.length;
  let plan: ParallelPlan;
  if (o.kind === 'pp' || o.kind === 'hybrid') {
    const counts = stageCounts(m, nodes, o, tpSize);
    if (!counts) return undefined;
    plan = buildPlan(m.config, m.tensors, { kind: o.kind, nodes: nodes.length, tpSize, stageLayers: counts });
  } else {
    plan = buildPlan(m.config, m.tensors, {
      kind: o.kind,
      nodes: nodes.length,
      ...(o.kind === 'ep' && o.expertSets ? { expertSets: o.expertSets } : {}),
    });
  }
  const buffers = comm(plan.nodes, plan.tpSize, o);
  const bytes = sizes(m, plan, buffers, o);
  return fits(bytes, nodes) ? { plan, bytes, totalBytes: total, commBytes: buffers } : undefined;
}

/** A placement that would fit nodes like these (same smallest limit), for the error message. */
function suggestion(m: ModelInfo, nodes: readonly NodeSpec[], o: PlaceOptions): string {
  const limit = Math.min(...nodes.map((n) => n.memLimit ?? Infinity));
  const kinds: ParallelKind[] = o.kind === 'pp' ? ['pp', 'tp'] : [o.kind, 'pp'];
  for (let n = nodes.length; n <= Math.max(64, nodes.length); n++) {
    for (const kind of kinds) {
      if (kind === 'ep' && m.config.expertCount < n) continue;
      if (kind === 'hybrid' && n % (o.tpSize ?? 2) !== 0) continue;
      const same = n === nodes.length ? nodes : Array.from({ length: n }, () => ({ memLimit: limit }));
      try {
        const p = tryPlace(m, same, { ...o, kind });
        if (p)
          return `--nodes ${n} --parallel ${kind} would fit: ${describePlan(p.plan)
            .map((line, r) => `${line} (${formatBytes(p.bytes[r]!)})`)
            .join('; ')}`;
      } catch {
        // this split is impossible for the model (too many ranks); try the next
      }
    }
  }
  return 'no placement on up to 64 nodes of this size fits; raise --mem-limit';
}

/**
 * Chooses what each node holds: checks every rank's bytes against its limit before anything
 * loads. Throws PAR_NO_FIT with the sizes and a placement that would fit.
 */
export function placeModel(m: ModelInfo, nodes: readonly NodeSpec[], o: PlaceOptions): Placement {
  const got = tryPlace(m, nodes, o);
  if (got) return got;
  const tpSize = o.kind === 'pp' ? 1 : o.kind === 'hybrid' ? (o.tpSize ?? 2) : nodes.length;
  const even = buildPlan(m.config, m.tensors, { kind: o.kind, nodes: nodes.length, tpSize });
  const buffers = comm(even.nodes, even.tpSize, o);
  const need = sizes(m, even, buffers, o);
  const total = shardBytes(m.config, m.tensors, fullShard(m.config), o);
  const limits = nodes.map((n) => (n.memLimit === undefined ? 'unlimited' : formatBytes(n.memLimit)));
  const over = need.map((b, r) => `rank ${r} needs ${formatBytes(b)} of ${limits[r]}`).join(', ');
  const ofWhich = buffers > 0 ? ` (each including ${formatBytes(buffers)} of ${o.provider} buffers)` : '';
  const seqs = o.sequences ?? 1;
  const perSlot =
    seqs > 1
      ? (total - shardBytes(m.config, m.tensors, fullShard(m.config), { ...o, sequences: 1 })) / (seqs - 1)
      : 0;
  const hint =
    suggestion(m, nodes, o) +
    (seqs > 1
      ? `; or serve fewer --slots or a smaller --context: each of the ${seqs} slots holds ${formatBytes(perSlot)} of KV cache`
      : '');
  throw new TandemError(
    'PAR_NO_FIT',
    `the model (${formatBytes(total)} with its KV cache) does not fit ${nodes.length} node(s) with --parallel ${o.kind}: ${over}${ofWhich}`,
    {
      hint,
      details: {
        totalBytes: total,
        needBytes: need,
        commBytes: buffers,
        limits: nodes.map((n) => n.memLimit ?? null),
        kind: o.kind,
      },
    },
  );
}
