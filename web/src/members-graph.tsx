import { forceCenter, forceCollide, forceLink, forceManyBody, forceSimulation } from 'd3-force';
import { useMemo } from 'preact/hooks';
import { bytes } from './format.js';
import type { MemberView } from './types.js';

interface GraphNode {
  id: string;
  member: MemberView | null;
  x?: number;
  y?: number;
}

interface GraphLink {
  source: string | GraphNode;
  target: string | GraphNode;
  member: MemberView;
}

const WIDTH = 420;
const HEIGHT = 260;
const COORDINATOR = 'coordinator';

/**
 * Positions the coordinator and the members with a force layout, run to rest at once (the
 * graph changes only when a member comes or goes). An edge is the coordinator's control
 * connection to a member; links measured between members are not reported yet.
 */
function layout(members: MemberView[]): { nodes: GraphNode[]; links: GraphLink[] } {
  const nodes: GraphNode[] = [
    { id: COORDINATOR, member: null },
    ...members.map((m) => ({ id: m.id, member: m })),
  ];
  const links: GraphLink[] = members.map((m) => ({ source: COORDINATOR, target: m.id, member: m }));
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

/** The cluster as a graph: the coordinator, each member with its state and memory bar. */
export function MembersGraph({ members }: { members: MemberView[] }) {
  const shape = members.map((m) => m.id).join('\n');
  // the layout follows the member ids only: a state or memory change keeps the positions
  const { nodes, links } = useMemo(() => layout(members), [shape]);
  const byId = new Map(members.map((m) => [m.id, m]));
  const maxMemory = Math.max(1, ...members.map((m) => m.memory_bytes ?? 0));
  return (
    <svg class="graph" viewBox={`0 0 ${WIDTH} ${HEIGHT}`} role="img" aria-label="cluster graph">
      {links.map((l) => {
        const s = l.source as GraphNode;
        const t = l.target as GraphNode;
        const state = byId.get(t.id)?.state ?? 'dead';
        return (
          <line
            key={t.id}
            class={`edge ${state}`}
            x1={clampX(s.x)}
            y1={clampY(s.y)}
            x2={clampX(t.x)}
            y2={clampY(t.y)}
          />
        );
      })}
      {nodes.map((n) => {
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
            </text>
            <rect class="bar-bg" x="-48" y="13" width="96" height="4" />
            <rect class="bar" x="-48" y="13" width={96 * share} height="4" />
          </g>
        );
      })}
    </svg>
  );
}
