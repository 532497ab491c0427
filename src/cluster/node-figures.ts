import { performance } from 'node:perf_hooks';
import type { LoadedRank } from '../parallel/index.js';
import { MalformedMessage } from './control-messages.js';
import type { LinkProbe } from './link-probe.js';

/** One member's link to a peer of its placement, as its heartbeat reports it. */
export interface PeerFigures {
  /** The peer's rank in the placement. */
  peer: number;
  /** Bytes sent to / received from the peer since the placement's links came up. */
  sent: number;
  received: number;
  /** Measured when the model was placed (link-probe.ts); null where not measured. */
  latencyUs: number | null;
  bandwidthMBps: number | null;
}

/**
 * What a member that holds a shard adds to each heartbeat (the `figures` field: additive, so a
 * coordinator that does not read it is unaffected and the protocol version stays). Totals
 * count since the load.
 */
export interface NodeFigures {
  /** Its rank in the placement these figures are of. */
  rank: number;
  links: PeerFigures[];
  /** Milliseconds of serving steps spent computing, and waiting on the group (collectives, exchange). */
  computeMs: number;
  commMs: number;
}

/** A member's serving steps, split into compute and the time its communication meter counted. */
export class StepClock {
  computeMs = 0;
  commMs = 0;

  /** Runs one step; the meter's rise during it is communication, the rest compute. */
  async time<T>(meter: { ms: number }, work: () => Promise<T>): Promise<T> {
    const t0 = performance.now();
    const comm0 = meter.ms;
    try {
      return await work();
    } finally {
      const comm = meter.ms - comm0;
      this.commMs += comm;
      this.computeMs += Math.max(0, performance.now() - t0 - comm);
    }
  }
}

/**
 * This member's figures: bytes per peer from the world's router (messages, relays, puts) and
 * from the tensor-parallel exchange (which writes past the router: each exchange sends one
 * part to every peer of the group and gets one from each), with the probe's measurements.
 */
export function collectFigures(ctx: LoadedRank, probes: readonly LinkProbe[], clock: StepClock): NodeFigures {
  const bytes = ctx.world.router.peerBytes();
  const ex = ctx.exchange;
  if (ex)
    for (const peer of ctx.group.members) {
      if (peer === ctx.world.rank) continue;
      const t = bytes.get(peer) ?? { sent: 0, received: 0 };
      t.sent += ex.peerBytes;
      t.received += ex.peerBytes;
      bytes.set(peer, t);
    }
  const peers = new Set([...bytes.keys(), ...probes.map((p) => p.peer)]);
  return {
    rank: ctx.world.rank,
    links: [...peers]
      .sort((a, b) => a - b)
      .map((peer) => {
        const probe = probes.find((p) => p.peer === peer);
        const b = bytes.get(peer);
        return {
          peer,
          sent: b?.sent ?? 0,
          received: b?.received ?? 0,
          latencyUs: probe?.latencyUs ?? null,
          bandwidthMBps: probe?.bandwidthMBps ?? null,
        };
      }),
    computeMs: clock.computeMs,
    commMs: clock.commMs,
  };
}

const count = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;
const countOrNull = (v: unknown): boolean => v === null || count(v);

/**
 * A heartbeat's `figures`, checked once at the coordinator's edge: absent gives undefined;
 * present but not of the shape above is a malformed message (MalformedMessage).
 */
export function parseFigures(v: unknown): NodeFigures | undefined {
  if (v === undefined) return undefined;
  const bad = (what: string): MalformedMessage => new MalformedMessage(`'heartbeat' with ${what}`);
  if (typeof v !== 'object' || v === null) throw bad('figures that are not an object');
  const f = v as Record<string, unknown>;
  if (!Number.isInteger(f.rank) || (f.rank as number) < 0) throw bad('no rank in its figures');
  if (!count(f.computeMs) || !count(f.commMs)) throw bad('no compute or communication time');
  if (!Array.isArray(f.links) || f.links.length > 4096) throw bad('no list of links');
  const links = f.links.map((l: unknown): PeerFigures => {
    const o = (typeof l === 'object' && l !== null ? l : {}) as Record<string, unknown>;
    if (
      !Number.isInteger(o.peer) ||
      !count(o.sent) ||
      !count(o.received) ||
      !countOrNull(o.latencyUs) ||
      !countOrNull(o.bandwidthMBps)
    )
      throw bad('a malformed link');
    return {
      peer: o.peer as number,
      sent: o.sent as number,
      received: o.received as number,
      latencyUs: o.latencyUs as number | null,
      bandwidthMBps: o.bandwidthMBps as number | null,
    };
  });
  return { rank: f.rank as number, links, computeMs: f.computeMs as number, commMs: f.commMs as number };
}
