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
}

export interface ClusterView {
  members: MemberView[];
  /** Links between members: filled by the topology work (none measured here yet). */
  links: never[];
  /** Where the model sits now; null while it is placed nowhere (too few members, or too little memory). */
  placement: {
    parallel: string;
    provider: string;
    /** Why `--parallel auto` chose this split; null when it was given. */
    reason: string | null;
    ranks: { id: string; holds: string }[];
  } | null;
  /** Why the model is placed nowhere, when it is not. */
  waiting: string | null;
  /** Why the latest join did or did not re-plan: each placement's predicted decode speed and the margin; null before a join to a placed model. */
  replan: string | null;
  /** Placements done, the first included. */
  placements: number;
  /** Placements after the first (a member lost or joined). */
  replacements: number;
  /** The latest events, oldest first (at most MAX_EVENTS). */
  events: ClusterEvent[];
}

/** What happened to the cluster, in order (the log and the dashboard show them). */
export interface ClusterEvent {
  kind: 'joined' | 'lost' | 'replaced' | 'no-placement' | 'link-down';
  atMs: number;
  message: string;
}
