import type { LinkView, MemberView } from './cluster-view.js';
import type { NodeFigures } from './node-figures.js';
import type { ControlClient, HeartbeatSample } from './protocol.js';

/** A member as the link views need it. */
export interface LinkedMember {
  id: string;
  client: ControlClient;
  state: MemberView['state'];
}

/** The coordinator's end of every control link, named so in `from`. */
export const COORDINATOR = 'coordinator';

/** The figures of a heartbeat when they are of rank `rank` of the current placement (older ones are of a placement gone). */
function figuresOf(sample: HeartbeatSample | undefined, rank: number): NodeFigures | undefined {
  return sample?.figures?.rank === rank ? sample.figures : undefined;
}

/** Seconds between a client's last two heartbeats, or undefined before it has sent two. */
function spanS(c: ControlClient): number | undefined {
  const cur = c.heartbeat;
  const prev = c.previousHeartbeat;
  if (!cur || !prev || cur.atMs <= prev.atMs) return undefined;
  return (cur.atMs - prev.atMs) / 1000;
}

/**
 * A member's compute and communication shares (MemberView): over the steps between its last
 * two heartbeats, or over every step since the load when none ran between them; null before
 * it has run a step of the current placement.
 */
export function memberShares(
  c: ControlClient,
  rank: number | undefined,
): Pick<MemberView, 'compute_share' | 'comm_share'> {
  const none = { compute_share: null, comm_share: null };
  if (rank === undefined) return none;
  const cur = figuresOf(c.heartbeat, rank);
  if (!cur) return none;
  const prev = figuresOf(c.previousHeartbeat, rank);
  let compute = cur.computeMs - (prev?.computeMs ?? 0);
  let comm = cur.commMs - (prev?.commMs ?? 0);
  if (!(compute + comm > 0)) {
    compute = cur.computeMs;
    comm = cur.commMs;
  }
  const total = compute + comm;
  return total > 0 ? { compute_share: compute / total, comm_share: comm / total } : none;
}

/** The coordinator's control link to each member: bytes counted on its socket, latency from quick round trips. */
function controlLinks(members: readonly LinkedMember[]): LinkView[] {
  return members.map((m) => {
    const c = m.client;
    const { sent, received } = c.controlBytes;
    const span = spanS(c);
    const cur = c.heartbeat;
    const prev = c.previousHeartbeat;
    const moved =
      cur && prev ? cur.controlSent + cur.controlReceived - prev.controlSent - prev.controlReceived : 0;
    return {
      from: COORDINATOR,
      to: m.id,
      kind: 'control',
      latency_us: c.bestRttMs !== undefined ? (c.bestRttMs / 2) * 1000 : null,
      bandwidth_MBps: null,
      bytes_sent: sent,
      bytes_received: received,
      bytes_per_s: span ? Math.max(0, moved) / span : 0,
      state: m.state !== 'dead' && c.lostWith === undefined ? 'up' : 'down',
    };
  });
}

/**
 * The links between the members of the placement (`placed`: its clients in rank order), each
 * direction as its sender's heartbeat reports it; a member whose figures are not yet of this
 * placement contributes none until its next heartbeat.
 */
function placementLinks(
  placed: readonly ControlClient[],
  provider: string,
  isDown: (a: ControlClient, b: ControlClient) => boolean,
): LinkView[] {
  const out: LinkView[] = [];
  placed.forEach((c, rank) => {
    const cur = figuresOf(c.heartbeat, rank);
    if (!cur) return;
    const prev = figuresOf(c.previousHeartbeat, rank);
    const span = spanS(c);
    for (const l of cur.links) {
      const peer = placed[l.peer];
      if (!peer || l.peer === rank) continue;
      const before = prev?.links.find((p) => p.peer === l.peer);
      const moved = before ? l.sent + l.received - before.sent - before.received : 0;
      out.push({
        from: c.label,
        to: peer.label,
        kind: provider,
        latency_us: l.latencyUs,
        bandwidth_MBps: l.bandwidthMBps,
        bytes_sent: l.sent,
        bytes_received: l.received,
        bytes_per_s: span ? Math.max(0, moved) / span : 0,
        state: c.lostWith === undefined && peer.lostWith === undefined && !isDown(c, peer) ? 'up' : 'down',
      });
    }
  });
  return out;
}

/** A link that went down between two members alive, shown down (nothing is measured over it). */
function downLink(a: LinkedMember, b: LinkedMember, provider: string): LinkView {
  return {
    from: a.client.label,
    to: b.client.label,
    kind: provider,
    latency_us: null,
    bandwidth_MBps: null,
    bytes_sent: 0,
    bytes_received: 0,
    bytes_per_s: 0,
    state: 'down',
  };
}

/**
 * Every link `/v1/cluster` shows: the control links first, then the placement's, then each
 * link gone down between two members alive (`unlinked`) that the placement's do not show.
 */
export function clusterLinks(
  members: readonly LinkedMember[],
  placed: readonly ControlClient[],
  provider: string,
  unlinked: readonly (readonly [ControlClient, ControlClient])[] = [],
): LinkView[] {
  const isDown = (a: ControlClient, b: ControlClient): boolean =>
    unlinked.some(([x, y]) => (x === a && y === b) || (x === b && y === a));
  const links = [...controlLinks(members), ...placementLinks(placed, provider, isDown)];
  const alive = (c: ControlClient): LinkedMember | undefined =>
    members.find((m) => m.client === c && m.state !== 'dead');
  for (const [a, b] of unlinked) {
    const ma = alive(a);
    const mb = alive(b);
    const shown = links.some(
      (l) => l.kind !== 'control' && l.from === a.label && l.to === b.label && l.state === 'down',
    );
    if (ma && mb && !shown) links.push(downLink(ma, mb, provider));
  }
  return links;
}
