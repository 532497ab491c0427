// The shapes GET /v1/cluster answers with. No imports: the dashboard (web/, built for the
// browser) reads the same file.

/** A member as `GET /v1/cluster` shows it. */
export interface MemberView {
  id: string;
  address: string;
  /** The node process's id on its host. */
  pid: number | null;
  state: 'joining' | 'alive' | 'dead';
  /** Bytes it holds under the current placement (null when it holds nothing). */
  memory_bytes: number | null;
  /** Its measured compute speed (relative), null when unknown. */
  speed: number | null;
  /** Milliseconds since anything came from it. */
  last_heartbeat_ms: number;
  /**
   * Share of its serving steps' time spent computing, and waiting on its group (collectives,
   * exchange), 0..1, over the steps between its last two heartbeats (or since the load while
   * none ran since); null before it has run a step.
   */
  compute_share: number | null;
  comm_share: number | null;
}

/**
 * One direction of a link, as `from` sees it: between two members of the placement (kind: the
 * fabric provider, `shm`, `tcp`, `rdma`), or the coordinator's control connection to a member
 * (kind `control`, from `coordinator`).
 */
export interface LinkView {
  from: string;
  to: string;
  kind: string;
  /** One-way latency, µs, measured when the model was placed (control: half the best quick round trip); null when not measured. */
  latency_us: number | null;
  /** MB/s (1e6 bytes), measured when the model was placed; null when not measured (control links). */
  bandwidth_MBps: number | null;
  /** Bytes `from` sent to / received from `to` since the link came up. */
  bytes_sent: number;
  bytes_received: number;
  /** Bytes per second both ways between the last two heartbeats. */
  bytes_per_s: number;
  /** `up` while both ends are alive and placed (control: while the member is), else `down`. */
  state: 'up' | 'down';
}

export interface ClusterView {
  members: MemberView[];
  /** The control links, and the links between the members of the placement. */
  links: LinkView[];
  /** Where the model sits now; null while it is placed nowhere (too few members, or too little memory). */
  placement: {
    parallel: string;
    provider: string;
    /** Why `--parallel auto` chose this split; null when it was given. */
    reason: string | null;
    ranks: { id: string; holds: string }[];
    /** Pairs of its members not linked directly (a link went down), relayed through the others: `a-b`. */
    relaying?: string[];
  } | null;
  /** Why the model is placed nowhere, when it is not. */
  waiting: string | null;
  /** Why the latest join did or did not re-plan: each placement's predicted decode speed and the margin; null before a join to a placed model. */
  replan: string | null;
  /** Placements done, the first included. */
  placements: number;
  /** Placements after the first (a member lost or joined, or a link down with no relay path). */
  replacements: number;
  /** Times a link went down inside the placement and it was kept, its communicators rebuilt to relay around it. */
  relays?: number;
  /** Serving steps that ran a prompt piece and other streams' decode rows in one request to the nodes. */
  mixed_steps?: number;
  /** The latest events, oldest first (at most MAX_EVENTS). */
  events: ClusterEvent[];
}

/** What happened to the cluster, in order (the log and the dashboard show them). */
export interface ClusterEvent {
  kind: 'joined' | 'lost' | 'replaced' | 'relayed' | 'no-placement' | 'link-down' | 'experts';
  atMs: number;
  message: string;
}
