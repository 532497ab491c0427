import { hostname, totalmem } from 'node:os';
import { Counter, Gauge, type Metric, type Registry } from 'prom-client';
import type { ClusterView } from '../cluster/index.js';

/** One member of the cluster as /metrics shows it; a figure left out is not exported (never a fake 0). */
export interface MemberMetrics {
  /** The member's id, as `/v1/cluster` gives it. */
  id: string;
  /** Its state in membership: `joining`, `loading`, `ready`, `lost`, ... (counted by state). */
  state: string;
  /** Bytes the member's process holds (weights, KV caches, buffers): its resident set. */
  memoryUsedBytes?: number;
  /** Bytes the member may use: what placement counted it for. */
  memoryLimitBytes?: number;
  /** Share of a token's time the member spends computing, 0..1. */
  computeShare?: number;
  /** Share of a token's time the member spends communicating, 0..1. */
  commShare?: number;
  /** Seconds since the coordinator last heard the member's heartbeat. */
  heartbeatAgeS?: number;
}

/** One direction of a link between two members, as `member` sees it. */
export interface LinkMetrics {
  member: string;
  peer: string;
  /** What carries it: `thunderbolt`, `ethernet`, `shm`, `loopback`, ... */
  kind: string;
  /** Bytes `member` sent to `peer` since the link came up. */
  bytesSent: number;
  /** Bytes `member` received from `peer` since the link came up. */
  bytesReceived: number;
  /** Measured one-way latency, seconds (half a round trip). */
  latencyS?: number;
  /** Measured bandwidth, bytes per second. */
  bandwidthBytesPerS?: number;
}

/** The cluster at the moment of a scrape. Totals count since the serving process started. */
export interface ClusterMetricsSnapshot {
  members: MemberMetrics[];
  links?: LinkMetrics[];
  /** Placements agreed (the first included). */
  placements?: number;
  /** Placements redone after a member was lost or joined. */
  replacements?: number;
  /** Streams resumed on a new placement after their member was lost. */
  resumes?: number;
}

/**
 * What the serving process gives /metrics when it serves over nodes: `snapshot()` is called
 * once per scrape and must be cheap (read state, no I/O). Set it with
 * `ApiServer.metrics.setClusterSource(source)`; without one, none of these metrics appear.
 */
export interface ClusterMetricsSource {
  snapshot(): ClusterMetricsSnapshot;
}

type MemberFigure = 'memoryUsedBytes' | 'memoryLimitBytes' | 'computeShare' | 'commShare' | 'heartbeatAgeS';
type LinkFigure = 'bytesSent' | 'bytesReceived' | 'latencyS' | 'bandwidthBytesPerS';
type Total = 'placements' | 'replacements' | 'resumes';

type LinkLabel = 'member' | 'peer' | 'kind';
const LINK: readonly LinkLabel[] = ['member', 'peer', 'kind'];

/** The cluster's gauges and counters, registered only while a source is set and filled at each scrape. */
export class ClusterMetrics {
  private source: ClusterMetricsSource | undefined;
  /** Each metric's name (prom-client's types do not expose it), for registering and removing. */
  private readonly names = new Map<Metric, string>();
  private readonly members = this.gauge<'state'>(
    'tandem:cluster_members',
    'Members of the cluster by state.',
    ['state'],
  );
  private readonly perMember: [MemberFigure, Gauge<'member'>][] = (
    [
      ['memoryUsedBytes', 'tandem:member_memory_used_bytes', "Bytes the member's process holds."],
      [
        'memoryLimitBytes',
        'tandem:member_memory_limit_bytes',
        'Bytes the member may use (what placement counted).',
      ],
      [
        'computeShare',
        'tandem:member_compute_share',
        "Share of each token's time the member computes, 0..1.",
      ],
      ['commShare', 'tandem:member_comm_share', "Share of each token's time the member communicates, 0..1."],
      ['heartbeatAgeS', 'tandem:member_heartbeat_age_seconds', "Seconds since the member's last heartbeat."],
    ] as const
  ).map(([key, name, help]) => [key, this.gauge<'member'>(name, help, ['member'])]);
  private readonly perLink: [LinkFigure, Counter<LinkLabel> | Gauge<LinkLabel>][] = [
    [
      'bytesSent',
      this.counter<LinkLabel>('tandem:link_sent_bytes_total', 'Bytes the member sent to the peer.', LINK),
    ],
    [
      'bytesReceived',
      this.counter<LinkLabel>(
        'tandem:link_received_bytes_total',
        'Bytes the member received from the peer.',
        LINK,
      ),
    ],
    [
      'latencyS',
      this.gauge<LinkLabel>(
        'tandem:link_latency_seconds',
        'Measured one-way latency to the peer, seconds.',
        LINK,
      ),
    ],
    [
      'bandwidthBytesPerS',
      this.gauge<LinkLabel>(
        'tandem:link_bandwidth_bytes_per_second',
        'Measured bandwidth to the peer, bytes per second.',
        LINK,
      ),
    ],
  ];
  private readonly totals: [Total, Counter][] = (
    [
      ['placements', 'tandem:cluster_placements_total', 'Placements agreed, the first included.'],
      [
        'replacements',
        'tandem:cluster_replacements_total',
        'Placements redone after a member was lost or joined.',
      ],
      ['resumes', 'tandem:cluster_stream_resumes_total', 'Streams resumed after their member was lost.'],
    ] as const
  ).map(([key, name, help]) => [key, this.counter(name, help, [])]);

  constructor(private readonly registry: Registry) {}

  get hasSource(): boolean {
    return this.source !== undefined;
  }

  setSource(source: ClusterMetricsSource | undefined): void {
    this.source = source;
    if (!source) for (const name of this.names.values()) this.registry.removeSingleMetric(name);
  }

  /** Reads the source and sets every figure it gave; a figure it left out is not exported. */
  refresh(): void {
    if (!this.source) return;
    const snap = this.source.snapshot();
    this.members.reset();
    for (const m of snap.members) this.members.inc({ state: m.state });
    this.show(this.members, snap.members.length > 0);
    for (const [key, gauge] of this.perMember) {
      gauge.reset();
      for (const m of snap.members) {
        const value = m[key];
        if (value !== undefined) gauge.set({ member: m.id }, value);
      }
      this.show(
        gauge,
        snap.members.some((m) => m[key] !== undefined),
      );
    }
    const links = snap.links ?? [];
    for (const [key, metric] of this.perLink) {
      metric.reset();
      for (const l of links) {
        const value = l[key];
        if (value === undefined) continue;
        const labels = { member: l.member, peer: l.peer, kind: l.kind };
        if (metric instanceof Counter) metric.inc(labels, value);
        else metric.set(labels, value);
      }
      this.show(
        metric,
        links.some((l) => l[key] !== undefined),
      );
    }
    for (const [key, counter] of this.totals) {
      const value = snap[key];
      counter.reset();
      if (value !== undefined) counter.inc(value);
      this.show(counter, value !== undefined);
    }
  }

  /** Registers `metric` while it has something to say, and removes it when it has not. */
  private show(metric: Metric, present: boolean): void {
    const name = this.names.get(metric) as string;
    const registered = this.registry.getSingleMetric(name) !== undefined;
    if (present && !registered) this.registry.registerMetric(metric);
    else if (!present && registered) this.registry.removeSingleMetric(name);
  }

  private gauge<T extends string>(name: string, help: string, labelNames: readonly T[]): Gauge<T> {
    const g = new Gauge<T>({ name, help, labelNames, registers: [] });
    this.names.set(g, name);
    return g;
  }

  private counter<T extends string>(name: string, help: string, labelNames: readonly T[]): Counter<T> {
    const c = new Counter<T>({ name, help, labelNames, registers: [] });
    this.names.set(c, name);
    return c;
  }
}

/**
 * The one member a server on one machine is: this host, ready, its process's resident memory
 * (the model's weights, KV caches and buffers) against the machine's; all of each token's
 * time is computing. The server shows it until a cluster source replaces it.
 */
export function singleProcessSource(id = hostname()): ClusterMetricsSource {
  return {
    snapshot: () => ({
      members: [
        {
          id,
          state: 'ready',
          memoryUsedBytes: process.memoryUsage.rss(),
          memoryLimitBytes: totalmem(),
          computeShare: 1,
          commShare: 0,
        },
      ],
    }),
  };
}

/**
 * The source of a model served over nodes: its members as `/v1/cluster` shows them (the
 * memory placement counted for each, the age of its last heartbeat, its compute and
 * communication shares), its links (the control links labelled member="coordinator") and the
 * placements done.
 */
export function clusterViewSource(view: () => ClusterView): ClusterMetricsSource {
  return {
    snapshot() {
      const v = view();
      return {
        members: v.members.map((m) => ({
          id: m.id,
          state: m.state,
          ...(m.memory_bytes !== null ? { memoryLimitBytes: m.memory_bytes } : {}),
          heartbeatAgeS: m.last_heartbeat_ms / 1000,
          ...(m.compute_share !== null ? { computeShare: m.compute_share } : {}),
          ...(m.comm_share !== null ? { commShare: m.comm_share } : {}),
        })),
        links: v.links.map((l) => ({
          member: l.from,
          peer: l.to,
          kind: l.kind,
          bytesSent: l.bytes_sent,
          bytesReceived: l.bytes_received,
          ...(l.latency_us !== null ? { latencyS: l.latency_us / 1e6 } : {}),
          ...(l.bandwidth_MBps !== null ? { bandwidthBytesPerS: l.bandwidth_MBps * 1e6 } : {}),
        })),
        placements: v.placements,
        replacements: v.replacements,
      };
    },
  };
}
