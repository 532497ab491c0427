import { TandemError } from '../errors/index.js';
import { adjacency, type TopologyGraph } from './model.js';

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

/** Breadth-first hop counts from `start`; unreachable hosts are absent. */
export function hopsFrom(graph: TopologyGraph, start: string): Map<string, number> {
  const adj = adjacency(graph);
  const dist = new Map<string, number>([[start, 0]]);
  const queue = [start];
  for (let i = 0; i < queue.length; i++) {
    const h = queue[i] as string;
    for (const n of [...(adj.get(h) ?? [])].sort()) {
      if (dist.has(n)) continue;
      dist.set(n, (dist.get(h) as number) + 1);
      queue.push(n);
    }
  }
  return dist;
}

export function diameter(graph: TopologyGraph): number {
  let worst = 0;
  for (const h of graph.hosts) {
    const d = hopsFrom(graph, h);
    if (d.size < graph.hosts.length) return Infinity;
    for (const v of d.values()) worst = Math.max(worst, v);
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
 * host name so every host computes the same route. Throws when no route exists.
 */
export function route(graph: TopologyGraph, from: string, to: string): string[] {
  const adj = adjacency(graph);
  const back = new Map<string, string>();
  const seen = new Set([from]);
  const queue = [from];
  for (let i = 0; i < queue.length && !seen.has(to); i++) {
    const h = queue[i] as string;
    for (const n of [...(adj.get(h) ?? [])].sort()) {
      if (seen.has(n)) continue;
      seen.add(n);
      back.set(n, h);
      queue.push(n);
    }
  }
  if (!seen.has(to)) {
    throw new TandemError('TOPOLOGY_NO_ROUTE', `topology: no route from '${from}' to '${to}' over ${graph.links.length} links`, {
      hint: 'connect a cable so that every host can reach every other, then run `tandem topology` again',
      details: { from, to },
    });
  }
  const path = [to];
  while (path[0] !== from) path.unshift(back.get(path[0] as string) as string);
  return path;
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
 * smallest host name. Backtracking is fine for cluster sizes (a handful to a few dozen hosts).
 */
export function findRing(graph: TopologyGraph): string[] | undefined {
  const n = graph.hosts.length;
  if (n < 3) return undefined;
  const adj = adjacency(graph);
  const start = [...graph.hosts].sort()[0] as string;
  const path = [start];
  const used = new Set(path);
  let budget = 200_000;
  const extend = (): boolean => {
    if (--budget < 0) return false;
    const last = path[path.length - 1] as string;
    if (path.length === n) return adj.get(last)?.has(start) ?? false;
    for (const next of [...(adj.get(last) ?? [])].sort()) {
      if (used.has(next)) continue;
      path.push(next);
      used.add(next);
      if (extend()) return true;
      path.pop();
      used.delete(next);
    }
    return false;
  };
  return extend() ? path : undefined;
}

/**
 * Next-hop table in rank space (rank = index in `graph.hosts`): `nextHop[src][dst]` is the
 * neighbour `src` forwards to on the fewest-hop route to `dst` (`dst` itself when cabled, `src`
 * on the diagonal, -1 when unreachable). Plain data, like `toConnectivity`, for the relayed
 * collectives; every host computes the same table.
 */
export function toRouting(graph: TopologyGraph): { size: number; nextHop: number[][] } {
  const rank = new Map(graph.hosts.map((h, i) => [h, i]));
  const nextHop = graph.hosts.map((src, i) => {
    const reach = hopsFrom(graph, src);
    return graph.hosts.map((dst, j) => {
      if (i === j) return i;
      if (!reach.has(dst)) return -1;
      return rank.get(route(graph, src, dst)[1] as string) as number;
    });
  });
  return { size: graph.hosts.length, nextHop };
}
