import { randomBytes } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { isTandemError, TandemError } from '../errors/index.js';
import type { KernelsChoice } from '../kernels/webgpu/index.js';
import type { SamplerOptions } from '../engine/sampling/index.js';
import { GgufModelFile, configFromMetadata, maxTokensThatFit } from '../engine/index.js';
import type { ProviderName } from '../fabric/index.js';
import {
  profileFromRanks,
  writeExpertProfile,
  type ExpertProfile,
  type ParallelKind,
  type Placement,
  type WireFormat,
} from '../parallel/index.js';
import { readHostfile, type HostEntry } from './hostfile.js';
import { loadSecret } from '../topology/index.js';
import { launchLocalNodes, startingLine, type LocalNodes } from './launcher.js';
import { resolveModelPath } from './model-path.js';
import { busyLine } from './protocol.js';
import { ClusterSession, NODES_CONNECT_MS, type ClusterResult, type LoadOptions } from './session.js';

/** How to start (or reach) the nodes of a cluster and place a model on them. */
export interface ClusterStartOptions {
  /** Path of the model (resolved to an absolute one and checked here; the same path on every host). */
  model: string;
  /** Start this many local node processes (`--nodes N`)... */
  nodes?: number;
  /** ...or use the nodes of a hostfile (`--hosts FILE`) or these entries. */
  hosts?: string | readonly HostEntry[];
  /** tp, pp, ep or hybrid (default tp), or auto (chooseParallel: the cost model's pick among the splits that fit). */
  parallel?: ParallelKind | 'auto';
  /** hybrid: ranks per tensor-parallel group (default 2). */
  tpSize?: number;
  /** Fabric provider between nodes (default shm for local nodes, tcp for a hostfile). */
  provider?: ProviderName;
  /** Activations on the wire: f32 (default), f16 or q8. */
  wire?: WireFormat;
  /** Bytes each node may hold (`--mem-limit`). */
  memLimit?: number;
  /**
   * Greedy decoding only: the vocabulary-parallel head then exchanges only each rank's best
   * logit, and every rank's logits hold just that (default false: full logits).
   */
  greedy?: boolean;
  /** Compute threads per local node (default: the cores shared out). */
  threads?: number;
  /** Local nodes' kernels (`tandem node --kernels`; webgpu/auto: shards on the GPU). */
  kernels?: KernelsChoice;
  /**
   * Cluster secret. Local nodes get a random one of their own when absent; a hostfile run
   * takes TANDEM_SECRET by the one rule (at least 16 bytes, topology/discovery/secret.ts).
   */
  secret?: string;
  contextLength?: number;
  /** Sequences served at once (`serve --slots`): placement counts a KV cache of contextLength for each (default 1). */
  sequences?: number;
  /**
   * Members that lack the model receive their slices from the coordinator (default true);
   * false: each node must open the model at its path, and one that cannot fails the load.
   */
  slices?: boolean;
  /** ep: each layer's experts placed by this routing profile (--expert-profile), hot ones copied. */
  expertProfile?: ExpertProfile;
  /** Progress lines (starting nodes, plan, loading). */
  onProgress?: (line: string) => void;
}

export interface RunDistributedOptions extends Omit<ClusterStartOptions, 'greedy'> {
  prompt: readonly number[];
  maxTokens: number;
  stopTokens?: readonly number[];
  /**
   * Sampling options (the engine's SamplerOptions); absent or temperature 0 decodes
   * greedily, and then the vocabulary-parallel head exchanges only each rank's best logit.
   */
  sampling?: SamplerOptions;
  onToken?: (token: number) => void;
  /** After the run: each layer's expert routing, from the nodes' counters, written here (--save-expert-profile). */
  saveExpertProfile?: string;
  /**
   * Called before any node starts when maxTokens goes past the nodes' context: the run then
   * generates `fits` tokens and ends with stopReason `length` instead of failing.
   */
  onContextLimit?: (asked: number, fits: number, contextLength: number) => void;
}

/** A model loaded across nodes: the session that drives them, and how to stop them. */
export interface StartedCluster {
  session: ClusterSession;
  placement: Placement;
  /** What the model was loaded with: the same loads it again on survivors. */
  load: LoadOptions;
  provider: ProviderName;
  parallel: ParallelKind;
  /** Local nodes (`--nodes`), undefined for a hostfile's. */
  local: LocalNodes | undefined;
  /** `e` with a local node's exit cause added when one died (see LocalNodes.explain). */
  explain(e: unknown): Promise<unknown>;
  /** Drops the connections and stops local nodes. */
  close(): Promise<void>;
}

export interface DistributedResult extends ClusterResult {
  /** One line per rank: what it holds. */
  plan: string[];
  /** Bytes each rank holds (weights and KV cache). */
  bytes: number[];
  provider: ProviderName;
  parallel: ParallelKind;
}

/**
 * Starts local nodes (or connects to listed ones), places the model by memory (failing before
 * any load when it cannot fit) and loads every shard. On failure every local node is stopped
 * before this throws. The model path is resolved to an absolute one and checked first.
 */
export async function startCluster(o: ClusterStartOptions): Promise<StartedCluster> {
  if ((o.nodes === undefined) === (o.hosts === undefined)) {
    throw new TandemError('CLI_USAGE', 'pass exactly one of --nodes N or --hosts FILE', {
      hint: '--nodes starts local node processes; --hosts uses nodes started with `tandem node`',
    });
  }
  if (o.tpSize !== undefined && !(Number.isInteger(o.tpSize) && o.tpSize >= 1))
    throw new TandemError('CLI_USAGE', `--tp must be a positive integer, got ${o.tpSize}`, {
      hint: 'for example --tp 2 (nodes per tensor-parallel group with --parallel hybrid)',
    });
  const progress = o.onProgress ?? (() => {});
  let local: LocalNodes | undefined;
  let session: ClusterSession | undefined;
  const model = resolveModelPath(o.model);
  const secret =
    o.secret ?? (o.nodes !== undefined ? randomBytes(16).toString('hex') : loadSecret().toString('utf8'));
  let hostsUsed: readonly HostEntry[] | undefined;
  try {
    let hosts: readonly HostEntry[];
    if (o.nodes !== undefined) {
      if (!Number.isInteger(o.nodes) || o.nodes < 1 || o.nodes > 64)
        throw new TandemError('CLI_USAGE', `--nodes must be 1..64, got ${o.nodes}`, {
          hint: 'for example --nodes 2',
        });
      const threads = o.threads ?? Math.max(1, Math.floor(availableParallelism() / o.nodes));
      progress(startingLine(o.nodes, threads));
      local = await launchLocalNodes(o.nodes, {
        secret,
        threads,
        ...(o.kernels ? { kernels: o.kernels } : {}),
      });
      hosts = local.addresses.map((address) => ({ address }));
    } else {
      hosts = typeof o.hosts === 'string' ? readHostfile(o.hosts) : (o.hosts as readonly HostEntry[]);
    }
    hostsUsed = hosts;
    session = await ClusterSession.connect(hosts, secret, NODES_CONNECT_MS, (b) =>
      progress(busyLine(b, NODES_CONNECT_MS)),
    );
    const provider = o.provider ?? (local ? 'shm' : 'tcp');
    const parallel = o.parallel ?? 'tp';
    progress(`loading ${model} on ${hosts.length} node(s): --parallel ${parallel} over ${provider}`);
    const load: LoadOptions = {
      model,
      parallel,
      provider,
      greedy: o.greedy ?? false,
      ...(o.tpSize !== undefined ? { tpSize: o.tpSize } : {}),
      ...(o.wire ? { wire: o.wire } : {}),
      ...(o.memLimit !== undefined ? { memLimit: o.memLimit } : {}),
      ...(o.contextLength ? { contextLength: o.contextLength } : {}),
      ...(o.sequences ? { sequences: o.sequences } : {}),
      ...(o.onProgress ? { onProgress: o.onProgress } : {}),
      ...(o.slices === false ? { slices: false } : {}),
      ...(o.expertProfile ? { expertProfile: o.expertProfile } : {}),
    };
    const placement = await session.load(load);
    if (session.choice) progress(session.choice);
    for (const line of session.planLines()) progress(`  ${line}`);
    const nodes = local;
    const open = session;
    return {
      session: open,
      placement,
      load,
      provider,
      parallel: placement.plan.kind,
      local: nodes,
      explain: async (e) => (nodes ? nodes.explain(e) : e),
      close: async () => {
        open.close();
        await nodes?.stop();
      },
    };
  } catch (e) {
    session?.close();
    const err = hostsUsed ? explainNoFit(e, hostsUsed, o.memLimit, typeof o.hosts === 'string') : e;
    const explained = local ? await local.explain(err) : err;
    await local?.stop();
    throw explained;
  }
}

/**
 * `tandem run MODEL --nodes N | --hosts FILE`: starts the cluster (startCluster), generates,
 * and returns the tokens with every node's metrics. A maxTokens past the context is cut to
 * what fits (the run ends with `length`). Local nodes are always stopped before this returns
 * or throws.
 */
export async function runDistributed(o: RunDistributedOptions): Promise<DistributedResult> {
  const maxTokens = fitMaxTokens(resolveModelPath(o.model), o);
  const greedy = o.sampling === undefined || o.sampling.temperature === 0;
  const cluster = await startCluster({ ...o, greedy });
  try {
    const result = await cluster.session.generate({
      prompt: o.prompt,
      maxTokens,
      ...(o.stopTokens ? { stopTokens: o.stopTokens } : {}),
      ...(o.onToken ? { onToken: o.onToken } : {}),
      ...(greedy ? {} : { sampling: o.sampling as SamplerOptions }),
    });
    if (o.saveExpertProfile) await saveProfile(cluster, o.saveExpertProfile);
    return {
      ...result,
      plan: cluster.session.planLines(),
      bytes: cluster.placement.bytes,
      provider: cluster.provider,
      parallel: cluster.parallel,
    };
  } catch (e) {
    throw await cluster.explain(e);
  } finally {
    await cluster.close();
  }
}

/** Writes each layer's expert routing from the nodes' counters (their decaying window). */
async function saveProfile(cluster: StartedCluster, path: string): Promise<void> {
  const counts = await cluster.session.expertCounts();
  if (counts.length === 0)
    throw new TandemError('PAR_BAD_PROFILE', 'expert profile: the model has no experts to profile', {
      hint: 'drop --save-expert-profile, or run a mixture-of-experts model',
    });
  writeExpertProfile(path, profileFromRanks(cluster.placement.plan, counts));
}

/**
 * maxTokens cut to what the nodes' KV cache holds (src/parallel/runner.ts sizes it to
 * contextLength, at most the model's), so that the run ends with `length` where a node would
 * refuse the request after the whole load. A file whose context cannot be read here is left to
 * the nodes to check.
 */
function fitMaxTokens(model: string, o: RunDistributedOptions): number {
  let modelContext: number;
  try {
    const file = GgufModelFile.open(model);
    try {
      modelContext = configFromMetadata(
        (k) => file.meta(k),
        new Map([...file.tensors].map(([n, t]) => [n, t.dims])),
      ).contextLength;
    } finally {
      file.close();
    }
  } catch {
    return o.maxTokens;
  }
  const contextLength = Math.min(o.contextLength ?? modelContext, modelContext);
  const fits = maxTokensThatFit(o.prompt.length, o.maxTokens, contextLength);
  if (fits < o.maxTokens) o.onContextLimit?.(o.maxTokens, fits, contextLength);
  return fits;
}

/**
 * PAR_NO_FIT with where each rank's limit came from and what to raise: a node's limit is the
 * tightest of the run's --mem-limit, the hostfile's `mem=` and the node's own `tandem node
 * --mem-limit` (src/cluster/session.ts), and the placement error knows only the numbers.
 */
function explainNoFit(
  e: unknown,
  hosts: readonly HostEntry[],
  runLimit: number | undefined,
  fromHostfile: boolean,
): unknown {
  if (!isTandemError(e, 'PAR_NO_FIT')) return e;
  const limits = e.details.limits;
  if (!Array.isArray(limits)) return e;
  const sources = limits.flatMap((limit: unknown, r) => {
    if (typeof limit !== 'number') return [];
    const host = hosts[r];
    const where =
      limit === runLimit
        ? "the run's --mem-limit (raise it)"
        : limit === host?.memLimit
          ? `${fromHostfile ? "the hostfile's" : 'its'} mem= (raise it${fromHostfile ? ' on that line' : ''})`
          : `the node's own limit (restart \`tandem node\` there with a larger --mem-limit)`;
    return [`rank ${r} (${host?.address ?? '?'}): ${where}`];
  });
  if (sources.length === 0) return e;
  return new TandemError('PAR_NO_FIT', `${e.message}; the limits come from ${sources.join(', ')}`, {
    hint: `raise the limit where it comes from (above), or ${e.hint}`,
    details: { ...e.details, limitSources: sources },
    cause: e,
  });
}
