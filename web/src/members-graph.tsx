import { forceCenter, forceCollide, forceLink, forceManyBody, forceSimulation } from 'd3-force';
import { useMemo } from 'preact/hooks';
import { linkText, shareText } from '../../src/cluster/view-format.js';
import { bytes } from './format.js';
import type { LinkView, MemberView } from './types.js';

interface GraphNode {
  id: string;
  member: MemberView | null;
  x?: number;
  y?: number;
}

interface GraphLink {
  source: string | GraphNode;
  target: string | GraphNode;
  /** `control`, or the fabric's kind between two members. */
  kind: string;
  /** `source|target`: the edge's key (members' pairs in one order, both directions one edge). */
  key: string;
}

const WIDTH = 420;
const HEIGHT = 260;
const COORDINATOR = 'coordinator';

/** The edges: the coordinator's control link to each member, and one per pair of linked members. */
function edges(members: MemberView[], links: LinkView[]): GraphLink[] {
  const out: GraphLink[] = members.map((m) => ({
    source: COORDINATOR,
    target: m.id,
    kind: 'control',
    key: `${COORDINATOR}|${m.id}`,
  }));
  const ids = new Set(members.map((m) => m.id));
  for (const l of links) {
    if (l.kind === 'control' || !ids.has(l.from) || !ids.has(l.to)) continue;
    const [a, b] = l.from < l.to ? [l.from, l.to] : [l.to, l.from];
    const key = `${a}|${b}`;
    if (!out.some((e) => e.key === key)) out.push({ source: a, target: b, kind: l.kind, key });
  }
  return out;
}

/** The largest / smallest of the measured values; null when none was measured. */
function worst(xs: (number | null)[], pick: (...v: number[]) => number): number | null {
  const known = xs.filter((x): x is number => x !== null);
  return known.length > 0 ? pick(...known) : null;
}

/**
 * The figures an edge shows: a control link's own; between two members, both directions
 * together: the worse measurement of the two (higher latency, lower bandwidth) and the busier
 * direction's bytes/s (each counts the bytes both ways).
 */
function edgeFigures(e: GraphLink, links: LinkView[]): LinkView | undefined {
  const [a, b] = e.key.split('|') as [string, string];
  const both = links.filter(
    (l) => l.kind === e.kind && ((l.from === a && l.to === b) || (l.from === b && l.to === a)),
  );
  const first = both[0];
  if (!first) return undefined;
  return {
    ...first,
    latency_us: worst(
      both.map((l) => l.latency_us),
      Math.max,
    ),
    bandwidth_MBps: worst(
      both.map((l) => l.bandwidth_MBps),
      Math.min,
    ),
    bytes_per_s: Math.max(...both.map((l) => l.bytes_per_s)),
    state: both.every((l) => l.state === 'up') ? 'up' : 'down',
  };
}

/**
 * Positions the coordinator and the members with a force layout, run to rest at once (the
 * graph changes only when a member or a link comes or goes).
 */
function layout(members: MemberView[], linkViews: LinkView[]): { nodes: GraphNode[]; links: GraphLink[] } {
  const nodes: GraphNode[] = [
    { id: COORDINATOR, member: null },
    ...members.map((m) => ({ id: m.id, member: m })),
  ];
  const links = edges(members, linkViews);
  const simulation = forceSimulation<GraphNode>(nodes)
    .force('charge', forceManyBody().strength(-400))
    .force(
      'link',
      forceLink<GraphNode, GraphLink>(links)
        .id((n) => n.id)
        .distance(110),
    )
    .force('collide', forceCollide(48))
    .force('center', forceCenter(WIDTH / 2, HEIGHT / 2))
    .stop();
  simulation.tick(300);
  return { nodes, links };
}

function clampX(x: number | undefined): number {
  return Math.min(WIDTH - 60, Math.max(60, x ?? WIDTH / 2));
}

function clampY(y: number | undefined): number {
  return Math.min(HEIGHT - 30, Math.max(30, y ?? HEIGHT / 2));
}

/**
 * The cluster as a graph: the coordinator, each member with its state, memory bar and compute
 * share, each link labelled with its kind, latency, bandwidth and live bytes/s.
 */
export function MembersGraph({ members, links }: { members: MemberView[]; links: LinkView[] }) {
  const shape = [...members.map((m) => m.id), ...edges(members, links).map((e) => e.key)].join('\n');
  // the layout follows the member ids and linked pairs only: a figure changing keeps the positions
  const layoutNow = useMemo(() => layout(members, links), [shape]);
  const byId = new Map(members.map((m) => [m.id, m]));
  const maxMemory = Math.max(1, ...members.map((m) => m.memory_bytes ?? 0));
  const drawn = layoutNow.links.map((l) => {
    const s = l.source as GraphNode;
    const t = l.target as GraphNode;
    const figures = edgeFigures(l, links);
    const state = byId.get(t.id)?.state;
    const dead =
      (l.kind === 'control' && state !== 'alive' && state !== 'joining') || figures?.state === 'down';
    return { l, s, t, figures, dead, x1: clampX(s.x), y1: clampY(s.y), x2: clampX(t.x), y2: clampY(t.y) };
  });
  return (
    <svg class="graph" viewBox={`0 0 ${WIDTH} ${HEIGHT}`} role="img" aria-label="cluster graph">
      {drawn.map(({ l, x1, y1, x2, y2, dead }) => (
        <line key={l.key} class={`edge ${dead ? 'dead' : 'alive'}`} x1={x1} y1={y1} x2={x2} y2={y2} />
      ))}
      {layoutNow.nodes.map((n) => {
        const m = n.member ? (byId.get(n.id) ?? n.member) : null;
        const x = clampX(n.x);
        const y = clampY(n.y);
        if (!m)
          return (
            <g key={n.id} class="node coordinator" transform={`translate(${x},${y})`}>
              <circle r="18" />
              <text y="32">coordinator</text>
            </g>
          );
        const share = (m.memory_bytes ?? 0) / maxMemory;
        return (
          <g
            key={n.id}
            class={`node member ${m.state}`}
            data-member={m.id}
            transform={`translate(${x},${y})`}
          >
            <rect x="-56" y="-22" width="112" height="44" rx="6" />
            <text y="-6">{m.id}</text>
            <text y="8" class="small">
              {m.state}
              {m.memory_bytes !== null ? ` · ${bytes(m.memory_bytes)}` : ''}
              {m.compute_share !== null ? ` · ${shareText(m.compute_share)} compute` : ''}
            </text>
            <rect class="bar-bg" x="-48" y="13" width="96" height="4" />
            <rect class="bar" x="-48" y="13" width={96 * share} height="4" />
          </g>
        );
      })}
      {drawn.map(({ l, s, t, x1, y1, x2, y2, figures }) => (
        // labels over the nodes, so that none hides behind a member's box
        <g
          key={l.key}
          class={`link ${l.kind === 'control' ? 'control' : 'fabric'}`}
          data-from={s.id}
          data-to={t.id}
          data-kind={l.kind}
        >
          {figures && (
            <text class="small edge-label" x={(x1 + x2) / 2} y={(y1 + y2) / 2 - 4}>
              {linkText(figures)}
            </text>
          )}
        </g>
      ))}
    </svg>
  );
}
