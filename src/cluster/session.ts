import { TandemError } from '../errors/index.js';
import type { ProviderName } from '../fabric/index.js';
import { configFromMetadata } from '../engine/model/config.js';
import { GgufModelFile } from '../engine/model/gguf-model-file.js';
import type { SamplerOptions } from '../engine/sampling/index.js';
import {
  chooseParallel,
  describePlan,
  checkProfile,
  EXPERT_ROOM,
  expertSetsFromProfile,
  placeModel,
  predictStepSeconds,
  type ExpertProfile,
  type ExpertSets,
  type NodeSpec,
  type ParallelKind,
  type Placement,
  type RankExpertCounts,
  type RankMetrics,
  type WireFormat,
} from '../parallel/index.js';
import type { HostEntry } from './hostfile.js';
import type { LoadRequest } from './node-agent.js';
import { ControlClient, parseHostPort, type Message, type NodeBusy } from './protocol.js';
import { nodeSpeeds } from './speed.js';
import type { ShardOrigin } from './slices/model-source.js';
import { SliceServer } from './slices/slice-server.js';

export interface LoadOptions {
  model: string;
  /** `auto`: the split chooseParallel's cost model prefers among those that fit (the reason is kept in `choice`). */
  parallel: ParallelKind | 'auto';
  /** hybrid: ranks per tensor-parallel group (default 2). */
  tpSize?: number;
  /** ep: each node's experts (balanceExperts: by load, hot ones copied); default contiguous ranges. */
  expertSets?: ExpertSets;
  /** ep (given or chosen), without `expertSets`: each layer's experts placed by this routing profile. */
  expertProfile?: ExpertProfile;
  provider: ProviderName;
  wire?: WireFormat;
  /** Greedy decoding: exchange only each rank's best logit (exact for greedy). */
  greedy?: boolean;
  /** Caps every node (overrides the hostfile's and the nodes' own). */
  memLimit?: number;
  contextLength?: number;
  /** Sequences served at once (a server's slots): placement counts a KV cache for each (default 1). */
  sequences?: number;
  /** Deadline for every wait inside a collective on the nodes (default 30000 ms). */
  commTimeoutMs?: number;
  /** Deadline for the whole load (default 300000 ms). */
  timeoutMs?: number;
  /**
   * Pipeline placement follows the nodes' measured speeds where the hostfile gives none
   * (default true; local nodes on one machine are alike, so their launchers turn it off).
   */
  measuredSpeed?: boolean;
  /**
   * Serve slices to members that lack the model (or hold another file at its path) over an
   * authenticated connection beside the control one (default true).
   */
  slices?: boolean;
  /** Progress of long slice transfers, and where each rank's shard came from. */
  onProgress?: (line: string) => void;
}

export interface GenerateRequest {
  prompt: readonly number[];
  maxTokens: number;
  stopTokens?: readonly number[];
  onToken?: (token: number) => void;
  /**
   * Sampling instead of greedy decoding (load with `greedy: false` then). Every picking rank
   * runs the same seeded sampler on the same logits; a seed is chosen when none is given.
   */
  sampling?: SamplerOptions;
  /** Teacher forcing (see RankGenerateOptions.forced): the result then carries `predicted`. */
  forced?: readonly number[];
  /** Deadline for the whole generation (default 600000 ms); a lost node fails it at once. */
  timeoutMs?: number;
}

export interface ClusterResult {
  tokens: number[];
  stopReason: 'length' | 'stop';
  /** Per node, in rank order. */
  nodes: RankMetrics[];
  /** Rank 0's figures: the run's TTFT and decode speed. */
  ttftMs: number;
  prefillTokS: number;
  decodeTokS: number;
  /** With `forced`: the greedy pick at each step. */
  predicted?: number[];
}

/**
 * How the ranks of a load are linked when not every pair is (a link between two members went
 * down): the links there are, and the rank linked to all that serves the rendezvous.
 */
export interface Wiring {
  edges: [number, number][];
  root: number;
}

/**
 * Each layer's experts placed by the profile, with room for EXPERT_ROOM extra experts a layer
 * on each node for copies of hot ones, fewer where the nodes' memory does not hold that many
 * (PAR_NO_FIT from `place` at every room down to none: the error of the last).
 */
function placeProfiled(
  profile: ExpertProfile,
  nodes: number,
  place: (expertSets: ExpertSets) => Placement,
): Placement {
  for (let room = EXPERT_ROOM; ; room--) {
    try {
      return place(expertSetsFromProfile(profile, nodes, room));
    } catch (e) {
      if (room <= 0 || !(e instanceof TandemError && e.code === 'PAR_NO_FIT')) throw e;
    }
  }
}

/** How long connecting to a session's nodes may take by default (a busy node's turn included). */
export const NODES_CONNECT_MS = 30_000;

/** A coordinator's connections to a set of nodes; loads one model across them and runs generations. */
export class ClusterSession {
  placement: Placement | undefined;
  /** Why `--parallel auto` chose the current placement's split (undefined when it was given). */
  choice: string | undefined;
  /** Where each rank's shard came from at the last load (its own file, or slices received), and the bytes sent. */
  origins: ShardOrigin[] = [];
  slicesSent = 0;
  /** Every rank of the last load runs a prompt piece and decode rows in one pass (runsMixedInOnePass). */
  onePass = false;
  /**
   * The GEMM token lane group every rank of the last load named (gemmGroupOf), undefined when
   * one named none or they differ: the prompt pieces beside running streams fill it.
   */
  gemmGroup: number | undefined;

  private constructor(
    readonly hosts: readonly HostEntry[],
    readonly clients: ControlClient[],
    readonly infos: Message[],
  ) {}

  /** A session over connections made elsewhere (members that joined a cluster port). */
  static of(members: readonly { host: HostEntry; client: ControlClient; info: Message }[]): ClusterSession {
    return new ClusterSession(
      members.map((m) => m.host),
      members.map((m) => m.client),
      members.map((m) => m.info),
    );
  }

  /** The same connections less those in `drop` (lost members): survivors to re-place a model on. */
  without(drop: ReadonlySet<ControlClient>): ClusterSession {
    const keep = this.clients.flatMap((c, r) => (drop.has(c) ? [] : [r]));
    return new ClusterSession(
      keep.map((r) => this.hosts[r] as HostEntry),
      keep.map((r) => this.clients[r] as ControlClient),
      keep.map((r) => this.infos[r] as Message),
    );
  }

  /**
   * Connects to every node (authenticated) and asks each about itself; `onBusy` hears of a
   * node that serves another coordinator first (the connection waits for its turn).
   */
  static async connect(
    hosts: readonly HostEntry[],
    secret: string,
    timeoutMs = NODES_CONNECT_MS,
    onBusy?: (busy: NodeBusy) => void,
  ): Promise<ClusterSession> {
    const settled = await Promise.allSettled(
      hosts.map((h, r) =>
        ControlClient.connect(h.address, secret, `node ${r}`, timeoutMs, undefined, onBusy),
      ),
    );
    const clients = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    const failed = settled.find((s) => s.status === 'rejected');
    if (failed) {
      for (const c of clients) c.close();
      throw failed.reason;
    }
    const ok = clients as ControlClient[];
    try {
      const infos = await Promise.all(ok.map((c) => c.request('hello', {}, timeoutMs)));
      return new ClusterSession(hosts, ok, infos);
    } catch (e) {
      for (const c of ok) c.close();
      throw e;
    }
  }

  /**
   * Each node's memory cap and relative speed for placement: the tightest of the run's cap,
   * the hostfile's and the node's own; a hostfile speed, else the measured one relative to the
   * fastest node of this session (so two sessions' figures compare only within one session).
   */
  specs(o: LoadOptions): NodeSpec[] {
    const speeds = nodeSpeeds(
      this.hosts.map((h) => h.speed),
      this.infos.map((i) => (o.measuredSpeed !== false && typeof i.speed === 'number' ? i.speed : undefined)),
    );
    return this.hosts.map((h, r) => {
      const own = this.infos[r]?.memLimit;
      const caps = [o.memLimit, h.memLimit, typeof own === 'number' ? own : undefined].filter(
        (x): x is number => x !== undefined,
      );
      const memLimit = caps.length > 0 ? Math.min(...caps) : undefined;
      return {
        ...(memLimit !== undefined ? { memLimit } : {}),
        ...(speeds[r] !== undefined ? { speed: speeds[r] } : {}),
      };
    });
  }

  /**
   * The split these nodes would get (checking memory; PAR_NO_FIT when it does not fit), with
   * the cost model's decode step for it and, when `current` is given (a placement held by some
   * of these nodes, rank r on `current.holders[r]`), the step of that one on the same scale.
   */
  plan(
    o: LoadOptions,
    current?: { placement: Placement; holders: readonly ControlClient[] },
  ): { placement: Placement; choice: string | undefined; stepSeconds: number; currentSeconds?: number } {
    const file = GgufModelFile.open(o.model);
    try {
      const config = configFromMetadata(
        (k) => file.meta(k),
        new Map([...file.tensors].map(([n, t]) => [n, t.dims])),
      );
      const specs = this.specs(o);
      const info = { config, tensors: file.tensors };
      const common = {
        provider: o.provider,
        ...(o.contextLength ? { contextLength: o.contextLength } : {}),
        ...(o.sequences ? { sequences: o.sequences } : {}),
      };
      const choice = o.parallel === 'auto' ? chooseParallel(info, specs, common) : undefined;
      const kind = choice?.placement.plan.kind ?? (o.parallel as ParallelKind);
      const place = (expertSets?: ExpertSets): Placement =>
        placeModel(info, specs, {
          ...common,
          kind,
          ...(o.tpSize ? { tpSize: o.tpSize } : {}),
          ...(expertSets ? { expertSets } : {}),
        });
      const profiled = kind === 'ep' && !o.expertSets && o.expertProfile ? o.expertProfile : undefined;
      if (profiled) checkProfile(profiled, { experts: config.expertCount, layers: config.blockCount });
      const placement = profiled
        ? placeProfiled(profiled, specs.length, place)
        : (choice?.placement ?? place(o.expertSets));
      const step = (p: Placement, nodes: readonly NodeSpec[]): number =>
        predictStepSeconds(info, p, nodes, o.provider);
      const held = current?.holders.map((c) => specs[this.clients.indexOf(c)] ?? {});
      return {
        placement,
        choice: choice?.reason,
        stepSeconds: choice?.stepSeconds ?? step(placement, specs),
        ...(current && held ? { currentSeconds: step(current.placement, held) } : {}),
      };
    } finally {
      file.close();
    }
  }

  /** Every rank's expert counters (Model.expertLoad) as the loaded model holds them; [] for a dense model. */
  async expertCounts(timeoutMs = 30_000): Promise<RankExpertCounts[]> {
    const answers = await Promise.all(this.clients.map((c) => c.request('expert-load', {}, timeoutMs)));
    return answers.flatMap((a) => (a.counts ? [a.counts as unknown as RankExpertCounts] : []));
  }

  /**
   * Plans the split (checking memory before anything loads), then loads every shard. With
   * `keep` (a placement these nodes held, in this rank order) the same split is loaded again,
   * as when only the links between the ranks changed; `wiring` leaves out the pairs not linked.
   */
  async load(o: LoadOptions, wiring?: Wiring, keep?: Placement): Promise<Placement> {
    const planned = keep ? { placement: keep, choice: this.choice } : this.plan(o);
    const placement = planned.placement;
    this.choice = planned.choice;
    const slices =
      o.slices === false
        ? undefined
        : await SliceServer.start({
            model: o.model,
            mac: (role, n) => this.clients[0]!.macFor(role, n),
            ...(o.onProgress ? { onProgress: o.onProgress } : {}),
          });
    try {
      await this.loadShards(o, placement, slices, wiring);
    } finally {
      this.slicesSent = slices?.sentBytes ?? 0;
      slices?.close();
    }
    this.placement = placement;
    return placement;
  }

  private async loadShards(
    o: LoadOptions,
    placement: Placement,
    slices: SliceServer | undefined,
    wiring: Wiring | undefined,
  ): Promise<void> {
    const timeoutMs = o.timeoutMs ?? 300_000;
    const root = wiring?.root ?? 0;
    const base = (rank: number, rendezvous: string): Omit<LoadRequest, never> => ({
      model: o.model,
      plan: placement.plan,
      rank,
      provider: o.provider,
      rendezvous,
      fabricHost: parseHostPort(this.hosts[rank]!.address, 'node address').host,
      wire: o.wire ?? 'f32',
      logits: o.greedy ? 'argmax' : 'full',
      ...(o.contextLength ? { contextLength: o.contextLength } : {}),
      ...(o.sequences ? { sequences: o.sequences } : {}),
      timeoutMs: o.commTimeoutMs ?? 30_000,
      ...(slices ? { source: slices.addressFor(this.clients[rank]!.localAddress) } : {}),
      ...(wiring ? { root, edges: wiring.edges } : {}),
    });
    // the root listens first and names its address; the others then connect to it
    const first = this.clients[root]!;
    const listening = new Promise<string>((resolve) => {
      first.onEvent = (m) => {
        if (m.event === 'listening' && typeof m.address === 'string') resolve(m.address);
      };
    });
    const loadRoot = first.request('load', { ...base(root, `${base(root, '').fabricHost}:0`) }, timeoutMs);
    const address = await Promise.race([listening, loadRoot.then(() => '')]);
    const answers = await Promise.all(
      this.clients.map((c, r) =>
        r === root ? loadRoot : c.request('load', { ...base(r, address) }, timeoutMs),
      ),
    );
    this.origins = answers.map((a) => (a.origin as ShardOrigin | undefined) ?? { kind: 'local' });
    this.onePass = answers.every((a) => a.onePass === true);
    const groups = new Set(answers.map((a) => a.gemmGroup));
    const [group] = groups;
    this.gemmGroup = groups.size === 1 && typeof group === 'number' && group > 0 ? group : undefined;
    this.origins.forEach((g, rank) => {
      if (g.kind === 'slices')
        o.onProgress?.(
          `slices: rank ${rank} received ${(g.fetchedBytes / 1e6).toFixed(1)} MB (${(g.fetchedBytes / 1e6 / Math.max(g.ms / 1000, 1e-3)).toFixed(1)} MB/s) and read ${(g.cachedBytes / 1e6).toFixed(1)} MB from its cache: ${g.why}`,
        );
    });
  }

  /** Runs one generation on every node; resolves with rank 0's tokens and every node's metrics. */
  async generate(g: GenerateRequest): Promise<ClusterResult> {
    if (!this.placement)
      throw new TandemError('CLUSTER_PROTOCOL', 'generate before load', { hint: 'load a model first' });
    const timeoutMs = g.timeoutMs ?? 600_000;
    this.clients[0]!.onEvent = (m) => {
      if (m.event === 'token' && typeof m.token === 'number') g.onToken?.(m.token);
    };
    const body = {
      prompt: [...g.prompt],
      maxTokens: g.maxTokens,
      ...(g.stopTokens ? { stopTokens: [...g.stopTokens] } : {}),
      ...(g.forced ? { forced: [...g.forced] } : {}),
      ...(g.sampling
        ? { sampling: { ...g.sampling, seed: g.sampling.seed ?? Math.floor(Math.random() * 2 ** 31) } }
        : {}),
    };
    const results = await Promise.all(
      this.clients.map((c, r) =>
        c.request('generate', { ...body, stream: r === 0 && g.onToken !== undefined }, timeoutMs),
      ),
    );
    const r0 = results[0] as { tokens: number[]; stopReason: 'length' | 'stop'; metrics: RankMetrics };
    const predicted = results
      .map((r) => r.predicted as number[] | undefined)
      .find((p) => p !== undefined && p.length > 0);
    return {
      tokens: r0.tokens,
      stopReason: r0.stopReason,
      nodes: results.map((r) => (r as { metrics: RankMetrics }).metrics),
      ttftMs: r0.metrics.ttftMs,
      prefillTokS: r0.metrics.prefillTokS,
      decodeTokS: r0.metrics.decodeTokS,
      ...(predicted ? { predicted } : {}),
    };
  }

  /**
   * Every node streams `bytes` of Q8_0 weights through its matvec for `ms`, all at once
   * (probeStream); resolves with each node's weight bytes per second.
   */
  async streamRates(bytes: number, ms: number): Promise<number[]> {
    const results = await Promise.all(
      this.clients.map((c) => c.request('stream', { bytes, ms }, 60_000 + 2 * ms)),
    );
    return results.map((r) => Number(r.bytesPerSecond));
  }

  planLines(): string[] {
    return this.placement ? describePlan(this.placement.plan) : [];
  }

  async unload(): Promise<void> {
    await Promise.all(this.clients.map((c) => c.request('unload', {}, 30_000).catch(() => undefined)));
    this.placement = undefined;
  }

  /** Drops every connection: nodes abort their collectives and free the model. */
  close(): void {
    for (const c of this.clients) c.close();
  }
}
