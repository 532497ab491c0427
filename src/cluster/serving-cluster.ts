import { performance } from 'node:perf_hooks';
import { TandemError } from '../errors/index.js';
import { describePlan, type Placement } from '../parallel/index.js';
import type { ControlClient } from './protocol.js';
import type { ClusterSession, LoadOptions } from './session.js';

/** A member as `GET /v1/cluster` shows it. */
export interface MemberView {
  id: string;
  address: string;
  /** The node process's id on its host. */
  pid: number | null;
  state: 'alive' | 'dead';
  /** Bytes it holds under the current placement (null when dead). */
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
  placement: { parallel: string; provider: string; ranks: { id: string; holds: string }[] };
  replacements: number;
  /** The latest events, oldest first (at most MAX_EVENTS). */
  events: ClusterEvent[];
}

/** Events kept for /v1/cluster. */
const MAX_EVENTS = 100;

/** What happened to the cluster, in order (the log and the dashboard show them). */
export interface ClusterEvent {
  kind: 'lost' | 'replaced' | 'no-placement';
  atMs: number;
  message: string;
}

interface Member {
  id: string;
  client: ControlClient;
  state: 'alive' | 'dead';
}

/**
 * The nodes a served model runs on, as the coordinator keeps them: who is alive, where the
 * model sits, and re-placing it on the survivors when a member is lost. A member is lost when
 * its control connection closes or fails, or nothing comes from it for DEAD_AFTER_MS (a
 * stopped or stuck process); the survivors are then told at once to abort the step they run,
 * so they do not wait out their collective's timeout on it.
 */
export class ServingCluster {
  private members: Member[];
  private closing = false;
  replacements = 0;
  readonly events: ClusterEvent[] = [];
  /** Called with each event as it happens. */
  onEvent: (e: ClusterEvent) => void = () => {};

  constructor(
    private current: ClusterSession,
    private placement: Placement,
    private readonly load: LoadOptions,
  ) {
    this.members = current.clients.map((client) => ({ id: client.label, client, state: 'alive' }));
    for (const m of this.members) this.watch(m);
  }

  get session(): ClusterSession {
    return this.current;
  }

  /** Whether a member of the current placement is lost (its step cannot complete). */
  someLost(): boolean {
    return this.current.clients.some((c) => c.lostWith !== undefined);
  }

  /**
   * Loads the model again on the members still alive (their node processes stay up: they
   * drop their shards and load new slices). Throws CLUSTER_NO_PLACEMENT when they cannot hold
   * it, naming the bytes needed and held.
   */
  async replace(): Promise<Placement> {
    const lost = new Set(this.current.clients.filter((c) => c.lostWith !== undefined));
    const survivors = this.current.without(lost);
    if (survivors.clients.length === 0)
      throw this.noPlacement('every member is lost', 'start nodes and serve again');
    const started = performance.now();
    let placement: Placement;
    try {
      placement = await survivors.load(this.load);
    } catch (error) {
      if (error instanceof TandemError && error.code === 'PAR_NO_FIT')
        throw this.noPlacement(
          `the ${survivors.clients.length} member(s) left cannot hold the model: ${error.message}`,
          error.hint,
        );
      throw error;
    }
    this.current = survivors;
    this.placement = placement;
    this.replacements++;
    this.event(
      'replaced',
      `re-placed on ${survivors.clients.length} member(s) in ${(performance.now() - started).toFixed(0)} ms: ${describePlan(placement.plan).join('; ')}`,
    );
    return placement;
  }

  view(): ClusterView {
    const rankOf = new Map(this.current.clients.map((c, r) => [c, r]));
    const plan = describePlan(this.placement.plan);
    return {
      members: this.members.map((m) => {
        const rank = m.state === 'alive' ? rankOf.get(m.client) : undefined;
        const speed = m.client.info.speed ?? this.current.infos[rank ?? -1]?.speed;
        return {
          id: m.id,
          address: m.client.address,
          pid: typeof m.client.info.pid === 'number' ? m.client.info.pid : null,
          state: m.state,
          memory_bytes: rank !== undefined ? (this.placement.bytes[rank] ?? null) : null,
          speed: typeof speed === 'number' ? speed : null,
          last_heartbeat_ms: m.client.silentMs,
        };
      }),
      links: [],
      placement: {
        parallel: this.load.parallel,
        provider: this.load.provider,
        ranks: this.current.clients.map((c, r) => ({ id: c.label, holds: plan[r] ?? '' })),
      },
      replacements: this.replacements,
      events: [...this.events],
    };
  }

  /** Stops watching: closing the connections is not a loss. */
  close(): void {
    this.closing = true;
    this.current.close();
  }

  private watch(m: Member): void {
    m.client.onLost = (e) => {
      if (this.closing) return;
      m.state = 'dead';
      this.event('lost', `${m.id} (${m.client.address}) lost: ${e.message}`);
      for (const other of this.current.clients)
        if (other !== m.client) other.notify('abort', { reason: `${m.id} was lost` });
    };
  }

  private noPlacement(message: string, hint: string): TandemError {
    this.event('no-placement', message);
    return new TandemError('CLUSTER_NO_PLACEMENT', message, { hint });
  }

  private event(kind: ClusterEvent['kind'], message: string): void {
    const e = { kind, atMs: Date.now(), message };
    this.events.push(e);
    if (this.events.length > MAX_EVENTS) this.events.shift();
    this.onEvent(e);
  }
}
