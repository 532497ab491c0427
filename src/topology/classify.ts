import { TandemError } from '../errors/index.js';
import { adjacency, toConnectivity, type TopologyGraph } from './model.js';
import { neighbourLists } from './rank-graph.js';
import { findRing as findRankRing, hopCounts, shortestPath, shortestRoutes } from './routing.js';

/**
 * Shapes a cluster can have. `full-mesh`: every pair cabled (what JACCL needs); `ring`: a
 * single cycle through all hosts; `line`: a path; `star`: one hub cabled to every other host,
 * which are cabled only to it; `partial`: connected but none of these; `disconnected`: some
 * host cannot be reached at all. Two hosts with one cable are a full mesh; one host is `single`.
 */
export type TopologyClass = 'single' | 'full-mesh' | 'ring' | 'line' | 'star' | 'partial' | 'disconnected';

export interface Classification {
  kind: TopologyClass;
  /** Hosts in ring order (ring), path order (line); empty otherwise. */
  order: string[];
  /** The hub of a star. */
  hub?: string;
  /** Largest number of hops between two hosts (Infinity when disconnected). */
  diameter: number;
  /** Pairs with no direct cable, which relayed collectives must route through a neighbour. */
  missingPairs: [string, string][];
}

/** Hosts numbered by name (the order routes and rings break ties in) and their neighbour lists. */
function byName(graph: TopologyGraph): { names: string[]; adj: number[][] } {
  const names = [...graph.hosts].sort();
  const index = new Map(names.map((h, i) => [h, i]));
  const edges: [number, number][] = [];
  for (const l of graph.links) {
    const i = index.get(l.a);
    const j = index.get(l.b);
    if (i !== undefined && j !== undefined && i !== j) edges.push([i, j]);
  }
  return { names, adj: neighbourLists({ size: names.length, edges }) };
}

/** Fewest hops from `start` to every host it reaches; unreachable hosts are absent. */
export function hopsFrom(graph: TopologyGraph, start: string): Map<string, number> {
  const { names, adj } = byName(graph);
  const from = names.indexOf(start);
  const dist = new Map<string, number>([[start, 0]]);
  if (from < 0) return dist;
  hopCounts(adj, from).forEach((d, i) => {
    if (d >= 0) dist.set(names[i] as string, d);
  });
  return dist;
}

export function diameter(graph: TopologyGraph): number {
  const { adj } = byName(graph);
  let worst = 0;
  for (let i = 0; i < adj.length; i++) {
    for (const d of hopCounts(adj, i)) {
      if (d < 0) return Infinity;
      worst = Math.max(worst, d);
    }
  }
  return worst;
}

/** Walks a connected graph whose degrees are all <= 2 from `start`, returning the visit order. */
function walk(adj: Map<string, Set<string>>, start: string): string[] {
  const order = [start];
  let prev: string | undefined;
  let cur = start;
  for (;;) {
    const next = [...(adj.get(cur) ?? [])].sort().find((n) => n !== prev && !order.includes(n));
    if (next === undefined) return order;
    order.push(next);
    prev = cur;
    cur = next;
  }
}

export function classify(graph: TopologyGraph): Classification {
  const n = graph.hosts.length;
  const adj = adjacency(graph);
  const missingPairs: [string, string][] = [];
  const sorted = [...graph.hosts].sort();
  for (let i = 0; i < sorted.length; i++) {
    for (let j = i + 1; j < sorted.length; j++) {
      const x = sorted[i] as string;
      const y = sorted[j] as string;
      if (!adj.get(x)?.has(y)) missingPairs.push([x, y]);
    }
  }
  const diam = diameter(graph);
  const base = { order: [] as string[], diameter: diam, missingPairs };
  if (n <= 1) return { kind: 'single', ...base, diameter: 0 };
  if (diam === Infinity) return { kind: 'disconnected', ...base };
  if (missingPairs.length === 0) return { kind: 'full-mesh', ...base };
  const degree = (h: string): number => adj.get(h)?.size ?? 0;
  const degrees = sorted.map(degree);
  const edges = degrees.reduce((s, d) => s + d, 0) / 2;
  if (degrees.every((d) => d === 2)) return { kind: 'ring', ...base, order: walk(adj, sorted[0] as string) };
  const ends = sorted.filter((h) => degree(h) === 1);
  if (edges === n - 1 && ends.length === 2 && degrees.every((d) => d <= 2)) {
    return { kind: 'line', ...base, order: walk(adj, ends[0] as string) };
  }
  const hub = sorted.find((h) => degree(h) === n - 1);
  if (hub !== undefined && edges === n - 1) return { kind: 'star', ...base, hub };
  return { kind: 'partial', ...base };
}

/**
 * Shortest route (fewest hops) from `from` to `to`, both ends included; ties are broken by
 * host name (routing.ts's rule over hosts numbered by name) so every host computes the same
 * route. Throws when no route exists.
 */
export function route(graph: TopologyGraph, from: string, to: string): string[] {
  if (from === to) return [from];
  const { names, adj } = byName(graph);
  const [src, dst] = [names.indexOf(from), names.indexOf(to)];
  const path = src < 0 || dst < 0 ? undefined : shortestPath(adj, src, dst);
  if (path === undefined) {
    throw new TandemError(
      'TOPOLOGY_NO_ROUTE',
      `topology: no route from '${from}' to '${to}' over ${graph.links.length} links`,
      {
        hint: 'connect a cable so that every host can reach every other, then run `tandem topology` again',
        details: { from, to },
      },
    );
  }
  return path.map((i) => names[i] as string);
}

/** Relay routes for every pair without a direct cable (what the relayed collective algorithm uses). */
export function relayRoutes(graph: TopologyGraph): { from: string; to: string; via: string[] }[] {
  return classify(graph).missingPairs.map(([from, to]) => {
    const path = route(graph, from, to);
    return { from, to, via: path.slice(1, -1) };
  });
}

/**
 * A cycle through every host (a Hamiltonian ring), if the cables allow one; starts at the
 * smallest host name and is routing.ts's ring over hosts numbered by name. A cycle needs
 * three hosts at least.
 */
export function findRing(graph: TopologyGraph): string[] | undefined {
  if (graph.hosts.length < 3) return undefined;
  const { names, adj } = byName(graph);
  return findRankRing(adj)?.map((i) => names[i] as string);
}

/**
 * Next-hop table in rank space (rank = index in `graph.hosts`): `nextHop[src][dst]` is the
 * neighbour `src` forwards to on the fewest-hop route to `dst` (`dst` itself when cabled, `src`
 * on the diagonal, -1 when unreachable). Ties go to the smaller rank: the table a communicator
 * created with `toConnectivity(graph)` routes by. Plain data, like `toConnectivity`.
 */
export function toRouting(graph: TopologyGraph): { size: number; nextHop: number[][] } {
  return { size: graph.hosts.length, nextHop: shortestRoutes(neighbourLists(toConnectivity(graph))) };
}
