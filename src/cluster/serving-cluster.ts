import { performance } from 'node:perf_hooks';
import { unreachablePair } from '../collectives/index.js';
import { TandemError } from '../errors/index.js';
import { describePlan, usesDirectExchange, type Placement } from '../parallel/index.js';
import type { HostEntry } from './hostfile.js';
import { clusterLinks, memberShares } from './cluster-links.js';
import type { ClusterEvent, ClusterView } from './cluster-view.js';
import type { ControlClient, Message } from './protocol.js';
import { rebalanceExperts, type RebalanceOptions, type RebalanceReport } from './expert-rebalance.js';
import { relayWiring, unlinkedRanks } from './relay.js';
import { ClusterSession, type LoadOptions, type Wiring } from './session.js';

export type { ClusterEvent, ClusterView, MemberView } from './cluster-view.js';

/** Events kept for /v1/cluster. */
const MAX_EVENTS = 100;

/**
 * A join re-plans only when the cost model predicts the placement on every member alive
 * decodes at least this fraction faster than the current one. A re-plan pauses every stream
 * for a load on every member and a replay of each sequence's forwards; the cost model ranks
 * splits on nominal figures and errs by more than a few percent, so a gain it barely predicts
 * may be a loss, and one it predicts below this margin does not repay the pause soon. The
 * figures this was chosen from are in docs/cluster.md, "The join re-plan margin".
 */
export const REPLAN_MARGIN = 0.1;

interface Member {
  id: string;
  host: HostEntry;
  client: ControlClient;
  info: Message;
  state: 'joining' | 'alive' | 'dead';
}

export interface ServingClusterOptions {
  /** Place the model the first time only once this many members are alive (default 1). */
  minMembers?: number;
  /** A join re-plans when the predicted decode speed gains at least this fraction (default REPLAN_MARGIN). */
  replanMargin?: number;
}

/**
 * The nodes a served model runs on, as the coordinator keeps them: who is alive, where the
 * model sits, and placing it again when that changes. The coordinator is the only writer of
 * this state; members never vote.
 *
 * A member is lost when its control connection closes or fails, or nothing comes from it for
 * the silence limit (silenceLimitMs(): a stopped or stuck process); the members of the placement are then told at
 * once to abort the step they run, so they do not wait out their collective's timeout. A lost
 * member's state is dropped from every later placement. A member that joins is placed at the
 * next step boundary (`replanWanted`), or at once when the model is placed nowhere; a lost
 * member's placement is replaced at once. Placements run one at a time.
 */
export class ServingCluster {
  private readonly members: Member[] = [];
  private current: ClusterSession;
  private placement: Placement | undefined;
  private closing = false;
  private inflight: Promise<Placement> | undefined;
  /** Placements done so far (the first included): a step sent under one and failing under another was cut by a re-placement. */
  generation: number;
  private placedWaiters: (() => void)[] = [];
  /** Why the model is placed nowhere (too few members, too little memory). */
  waiting: TandemError | undefined;
  /** A member joined since the last placement: place again at the next step boundary. */
  replanWanted = false;
  /** Placements after the first (a member lost or joined). */
  replacements = 0;
  /** Why the latest join did or did not re-plan (the predicted decode speeds and the margin). */
  replanVerdict: string | undefined;
  /** Pairs of members whose link went down: a placement holds both only when it relays around it. */
  private readonly unlinked: [ControlClient, ControlClient][] = [];
  /** How the current placement's ranks are linked; undefined: every pair directly. */
  private wiring: Wiring | undefined;
  /** A link of the current placement went down and the others can relay around it: rebuild its communicators, same shards. */
  private relayWanted = false;
  /** Times the placement was kept and its communicators rebuilt around a link gone down. */
  relays = 0;
  /** Serving steps that carried a prompt piece and decode rows in one request (ClusterSlotModel.forwardMixed). */
  mixedSteps = 0;
  readonly events: ClusterEvent[] = [];
  /** Called with each event as it happens. */
  onEvent: (e: ClusterEvent) => void = () => {};

  constructor(
    session: ClusterSession,
    placement: Placement | undefined,
    private readonly load: LoadOptions,
    private readonly options: ServingClusterOptions = {},
  ) {
    this.current = session;
    this.placement = placement;
    this.generation = placement ? 1 : 0;
    session.clients.forEach((client, r) => {
      this.adopt({
        id: client.label,
        host: session.hosts[r] as HostEntry,
        client,
        info: session.infos[r] ?? {},
        state: placement ? 'alive' : 'joining',
      });
      // members a launcher or hostfile brought are joined as those that dial in are (the events list shows both)
      this.event('joined', `${client.label} (${client.address}) joined`);
    });
    if (!placement) this.waiting = this.tooFew();
  }

  get session(): ClusterSession {
    return this.current;
  }

  /** Whether the model is placed now. */
  get placed(): boolean {
    return this.placement !== undefined;
  }

  /** Whether a member of the current placement is lost (its step cannot complete). */
  someLost(): boolean {
    return this.current.clients.some((c) => c.lostWith !== undefined);
  }

  /**
   * A member that joined (authenticated, and answered hello): placed now if nothing is, else
   * at the next step when the placement on every member alive is predicted faster by the
   * margin; otherwise it waits, alive and unplaced, for a later re-placement.
   */
  join(client: ControlClient, host: HostEntry, info: Message): void {
    this.adopt({ id: client.label, host, client, info, state: 'joining' });
    if (!this.placement) {
      this.event('joined', `${client.label} (${client.address}) joined`);
      void this.place().catch(() => undefined);
      return;
    }
    const verdict = this.judgeJoin();
    this.replanVerdict = verdict.reason;
    if (verdict.replan) this.replanWanted = true;
    this.event('joined', `${client.label} (${client.address}) joined; ${verdict.reason}`);
  }

  /** Whether placing on every member alive pays, by the cost model's decode step of each placement. */
  private judgeJoin(): { replan: boolean; reason: string } {
    const margin = this.options.replanMargin ?? REPLAN_MARGIN;
    const alive = this.placeable().members;
    const placement = this.placement as Placement;
    let planned;
    try {
      planned = ClusterSession.of(alive).plan(this.load, { placement, holders: this.current.clients });
    } catch (e) {
      return {
        replan: false,
        reason: `no re-plan: the members alive cannot be placed on (${(e as Error).message})`,
      };
    }
    const now = 1 / (planned.currentSeconds as number);
    const next = 1 / planned.stepSeconds;
    const gain = next / now - 1;
    const replan = gain >= margin;
    const figures = `predicted decode ${next.toFixed(0)} tok/s on ${alive.length} member(s) (${planned.placement.plan.kind}) against ${now.toFixed(0)} tok/s now on ${this.current.clients.length} (${placement.plan.kind}): ${gain >= 0 ? '+' : ''}${(gain * 100).toFixed(0)}%, margin ${(margin * 100).toFixed(0)}%`;
    return { replan, reason: `${replan ? 're-plan at the next step' : 'no re-plan'}: ${figures}` };
  }

  /** Resolves once the model is placed, or rejects with why it is not after `timeoutMs`. */
  whenPlaced(timeoutMs: number): Promise<void> {
    if (this.placement) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.placedWaiters = this.placedWaiters.filter((w) => w !== done);
        reject(this.waiting ?? this.tooFew());
      }, timeoutMs);
      const done = (): void => {
        clearTimeout(timer);
        resolve();
      };
      this.placedWaiters.push(done);
    });
  }

  /**
   * Places the model on every member alive (survivors drop their shards and load new slices;
   * their processes stay up). With too few members, or when they cannot hold it, nothing is
   * placed and CLUSTER_NO_PLACEMENT says why, with the bytes needed and held; `waiting` keeps
   * it until a member joins.
   */
  place(): Promise<Placement> {
    // one placement at a time; who asks while one runs gets that one (a member lost during it
    // fails it, and the caller asks again)
    this.inflight ??= this.placeNow().finally(() => (this.inflight = undefined));
    return this.inflight;
  }

  private async placeNow(): Promise<Placement> {
    this.replanWanted = false;
    const { members: alive, wiring } = this.placeable();
    // a link went down inside a placement that can relay around it: the same members keep the
    // same shards and only their communicators are rebuilt on the links left
    const kept =
      this.relayWanted &&
      alive.length === this.current.clients.length &&
      alive.every((m, r) => m.client === this.current.clients[r])
        ? this.placement
        : undefined;
    this.relayWanted = false;
    this.placement = undefined;
    // --min-members holds back the first placement; after it, any survivors that can hold the model do
    if (alive.length < (this.generation === 0 ? (this.options.minMembers ?? 1) : 1))
      throw this.noPlacement(this.tooFew());
    const session = kept ? this.current : ClusterSession.of(alive);
    const started = performance.now();
    // every member of the old placement lets go of it together: a lone unload would wait in
    // the closing barrier of its communicator for peers not yet told
    if (this.current.clients.length > 0)
      await this.current.without(new Set(this.current.clients.filter((c) => c.lostWith))).unload();
    let placement: Placement;
    try {
      placement = await session.load(this.load, wiring, kept);
    } catch (error) {
      if (error instanceof TandemError && error.code === 'PAR_NO_FIT')
        throw this.noPlacement(
          new TandemError(
            'CLUSTER_NO_PLACEMENT',
            `the ${alive.length} member(s) alive cannot hold the model: ${error.message}`,
            { hint: `add a member (tandem node --join) or raise its memory limit; ${error.hint}` },
          ),
        );
      const cut = this.unreachable(session.clients, error);
      if (cut) {
        // the members still connecting would wait out their deadline for the missing link
        for (const c of session.clients) c.notify('abort', { reason: `the link ${cut} is missing` });
        return this.placeNow();
      }
      throw error;
    }
    this.current = session;
    this.placement = placement;
    this.wiring = wiring;
    this.waiting = undefined;
    for (const m of alive) m.state = 'alive';
    this.generation++;
    const ms = (performance.now() - started).toFixed(0);
    if (kept) {
      this.relays++;
      this.event(
        'relayed',
        `kept the placement on ${alive.length} member(s), communicators rebuilt in ${ms} ms without the link(s) ${this.cutNames(session.clients)}, relayed through the others: ${describePlan(placement.plan).join('; ')}`,
      );
    } else {
      if (this.generation > 1) this.replacements++;
      const relayed = wiring ? `; relaying around the link(s) ${this.cutNames(session.clients)}` : '';
      this.event(
        'replaced',
        `placed on ${alive.length} member(s) in ${ms} ms: ${describePlan(placement.plan).join('; ')}${session.choice ? ` (${session.choice})` : ''}${relayed}`,
      );
    }
    for (const w of this.placedWaiters.splice(0)) w();
    return placement;
  }

  /**
   * The link between the members holding ranks `ranks` of the current placement went down
   * while both still reach the coordinator. When every pair of the placement can still reach
   * each other through the others (relayWiring), the placement is kept and its communicators
   * are rebuilt on the links left at the next step (`relayed`); otherwise the model is placed
   * again without one of the two, the later to join (`replaced`). Later placements relay
   * around the pair where they can, else leave one of it out.
   */
  linkDown(ranks: readonly [number, number], why: string): void {
    const [a, b] = ranks.map((r) => this.current.clients[r]);
    if (!a || !b) return;
    this.unlinked.push([a, b]);
    this.replanWanted = true;
    const clients = this.current.clients;
    const relay = this.placement !== undefined && this.relayable(clients) !== undefined;
    this.relayWanted = relay;
    const others = clients.filter((c) => c !== a && c !== b).map((c) => c.label);
    const drop = this.members.find((m) => m.client === b);
    this.event(
      'link-down',
      `the link between ${a.label} and ${b.label} is down (${why}); ${relay ? `relaying around it through ${others.join(', ')}, same placement` : `no relay path (${this.noRelayWhy(clients)}): placing without ${drop?.id ?? b.label}`}`,
    );
  }

  /**
   * A load that failed because one member found no route to another (a cable missing or
   * down that no step had crossed yet): that pair is recorded as unlinked, like a link seen
   * down in a step, so the next placement relays around it or leaves one of the two out.
   * Returns the pair's name, or undefined when the error is not that or the pair is known.
   */
  private unreachable(clients: readonly ControlClient[], error: unknown): string | undefined {
    const pair = unreachablePair(error);
    const [a, b] = pair ? pair.map((r) => clients[r]) : [];
    if (!a || !b || a.lostWith !== undefined || b.lostWith !== undefined) return undefined;
    if (this.unlinked.some(([x, y]) => (x === a && y === b) || (x === b && y === a))) return undefined;
    this.unlinked.push([a, b]);
    const name = `${a.label}-${b.label}`;
    this.event(
      'link-down',
      `the link between ${a.label} and ${b.label} is down (${(error as Error).message}); placing again without it`,
    );
    return name;
  }

  /**
   * Re-places the experts of an expert-parallel model by the members' counters while it
   * serves (expert-rebalance.ts): steps go on meanwhile; the outcome is an event.
   */
  async rebalanceExperts(o: Omit<RebalanceOptions, 'stillCurrent'> = {}): Promise<RebalanceReport> {
    if (!this.placement) throw this.waiting ?? this.tooFew();
    const generation = this.generation;
    const session = this.current;
    const report = await rebalanceExperts(session, this.load, {
      ...o,
      stillCurrent: () => generation === this.generation && !this.someLost(),
    });
    if (report.switched && generation === this.generation) this.placement = session.placement;
    this.event('experts', report.reason);
    return report;
  }

  /** How `clients` (in rank order) are linked when some pairs are down, if every pair can still be relayed. */
  private relayable(clients: readonly ControlClient[]): Wiring | undefined {
    if (usesDirectExchange(this.load.provider)) return undefined;
    return relayWiring(clients.length, unlinkedRanks(clients, this.unlinked));
  }

  private noRelayWhy(clients: readonly ControlClient[]): string {
    if (clients.length < 3) return `${clients.length} member(s), no third to relay through`;
    if (usesDirectExchange(this.load.provider))
      return `the ${this.load.provider} provider's tensor-parallel exchange links every pair directly`;
    return 'the links left do not connect every member with one linked to all';
  }

  /** The pairs down among `clients`, by label. */
  private cutNames(clients: readonly ControlClient[]): string {
    return unlinkedRanks(clients, this.unlinked)
      .map(([x, y]) => `${clients[x]?.label}-${clients[y]?.label}`)
      .join(', ');
  }

  /**
   * Members alive in join order, and how they are linked: all of them over the links left
   * when the others can relay around every pair down among them, else less one of each such
   * pair (the later to join) over every link.
   */
  private placeable(): { members: Member[]; wiring: Wiring | undefined } {
    const alive = this.members.filter((m) => m.state !== 'dead' && m.client.lostWith === undefined);
    const clients = alive.map((m) => m.client);
    if (unlinkedRanks(clients, this.unlinked).length === 0) return { members: alive, wiring: undefined };
    const wiring = this.relayable(clients);
    if (wiring) return { members: alive, wiring };
    const out: Member[] = [];
    for (const m of alive) {
      const cut = this.unlinked.some(
        ([x, y]) =>
          (x === m.client && out.some((o) => o.client === y)) ||
          (y === m.client && out.some((o) => o.client === x)),
      );
      if (cut) m.state = 'joining';
      else out.push(m);
    }
    return { members: out, wiring: undefined };
  }

  view(): ClusterView {
    const rankOf = new Map(this.current.clients.map((c, r) => [c, r]));
    const plan = this.placement ? describePlan(this.placement.plan) : [];
    return {
      members: this.members.map((m) => {
        const rank = this.placement && m.state === 'alive' ? rankOf.get(m.client) : undefined;
        return {
          id: m.id,
          address: m.client.address,
          pid: typeof m.client.info.pid === 'number' ? m.client.info.pid : null,
          state: m.state,
          memory_bytes: rank !== undefined ? (this.placement?.bytes[rank] ?? null) : null,
          speed: typeof m.info.speed === 'number' ? m.info.speed : null,
          last_heartbeat_ms: m.client.silentMs,
          ...memberShares(m.client, rank),
        };
      }),
      links: clusterLinks(
        this.members,
        this.placement ? this.current.clients : [],
        this.load.provider,
        this.unlinked,
      ),
      placement: this.placement
        ? {
            parallel: this.placement.plan.kind,
            provider: this.load.provider,
            reason: this.current.choice ?? null,
            ranks: this.current.clients.map((c, r) => ({ id: c.label, holds: plan[r] ?? '' })),
            relaying: this.wiring ? this.cutNames(this.current.clients).split(', ') : [],
          }
        : null,
      waiting: this.waiting?.message ?? null,
      replan: this.replanVerdict ?? null,
      placements: this.generation,
      replacements: this.replacements,
      relays: this.relays,
      mixed_steps: this.mixedSteps,
      events: [...this.events],
    };
  }

  /** Stops watching: closing the connections is not a loss. */
  close(): void {
    this.closing = true;
    for (const m of this.members) m.client.close();
  }

  private adopt(m: Member): void {
    this.members.push(m);
    m.client.onLost = (e) => {
      if (this.closing) return;
      m.state = 'dead';
      this.event('lost', `${m.id} (${m.client.address}) lost: ${e.message}`);
      if (!this.current.clients.includes(m.client) || !this.placement) return;
      for (const other of this.current.clients)
        if (other !== m.client) other.notify('abort', { reason: `${m.id} was lost` });
      // place again now, not at the next step: an idle server must not answer 200 on a broken placement
      void this.place().catch(() => undefined);
    };
  }

  private tooFew(): TandemError {
    const alive = this.members.filter((m) => m.state !== 'dead').length;
    const need = this.generation === 0 ? (this.options.minMembers ?? 1) : 1;
    return new TandemError(
      'CLUSTER_NO_PLACEMENT',
      `waiting for members: ${alive} alive, the model is placed once ${need} are`,
      { hint: 'start members with `tandem node --join HOST:PORT` and the cluster secret' },
    );
  }

  private noPlacement(e: TandemError): TandemError {
    this.waiting = e;
    this.event('no-placement', e.message);
    return e;
  }

  private event(kind: ClusterEvent['kind'], message: string): void {
    const e = { kind, atMs: Date.now(), message };
    this.events.push(e);
    if (this.events.length > MAX_EVENTS) this.events.shift();
    this.onEvent(e);
  }
}
