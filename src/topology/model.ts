import { TandemError } from '../errors/index.js';

/** What a cable (or network path) between two hosts is made of. */
export type LinkKind = 'tb5' | 'tb4' | 'ethernet' | 'wifi' | 'loopback' | 'unknown';

/** One cable between two hosts: `a`'s interface `aPort` is wired to `b`'s interface `bPort`. */
export interface Link {
  a: string;
  aPort: string;
  b: string;
  bPort: string;
  kind: LinkKind;
  /** Negotiated line rate, if known. */
  speedGbps?: number;
  /** Measured one-way latency (half a round trip). */
  latencyUs?: number;
  /** Measured bulk throughput over this link. */
  bandwidthGBps?: number;
}

/** The cluster's hosts and cables. Hosts are named; their order fixes the ranks of `toConnectivity`. */
export interface TopologyGraph {
  hosts: string[];
  links: Link[];
}

/** The plain shape a communicator is created with: ranks 0..size-1 and undirected edges [a, b] with a < b. */
export interface Connectivity {
  size: number;
  edges: [number, number][];
}

function invalid(message: string, hint: string, details?: Record<string, unknown>): TandemError {
  return new TandemError('TOPOLOGY_INVALID_GRAPH', message, details ? { hint, details } : { hint });
}

/** Checks a graph built from user input or the network: unique hosts, known endpoints, no self-links. */
export function makeGraph(hosts: readonly string[], links: readonly Link[]): TopologyGraph {
  const seen = new Set<string>();
  for (const h of hosts) {
    if (h.length === 0) throw invalid('topology: a host has an empty name', 'give every host a name');
    if (seen.has(h))
      throw invalid(`topology: host '${h}' is listed twice`, 'list each host once', { host: h });
    seen.add(h);
  }
  const ports = new Set<string>();
  for (const l of links) {
    for (const end of [l.a, l.b]) {
      if (!seen.has(end)) {
        throw invalid(
          `topology: link ${l.a}:${l.aPort} - ${l.b}:${l.bPort} names unknown host '${end}'`,
          `add '${end}' to the hosts or drop the link`,
          { host: end },
        );
      }
    }
    if (l.a === l.b)
      throw invalid(`topology: link from '${l.a}' to itself`, 'a cable must join two different hosts', {
        host: l.a,
      });
    for (const key of [`${l.a}\0${l.aPort}`, `${l.b}\0${l.bPort}`]) {
      if (ports.has(key)) {
        const [host, port] = key.split('\0');
        throw invalid(`topology: port ${host}:${port} carries two links`, 'each port takes one cable', {
          host,
          port,
        });
      }
      ports.add(key);
    }
  }
  return { hosts: [...hosts], links: links.map((l) => ({ ...l })) };
}

/** Neighbours of each host over the links (parallel cables count once). */
export function adjacency(graph: TopologyGraph): Map<string, Set<string>> {
  const adj = new Map<string, Set<string>>(graph.hosts.map((h) => [h, new Set<string>()]));
  for (const l of graph.links) {
    adj.get(l.a)?.add(l.b);
    adj.get(l.b)?.add(l.a);
  }
  return adj;
}

/** Links joining two hosts, in either direction. */
export function linksBetween(graph: TopologyGraph, x: string, y: string): Link[] {
  return graph.links.filter((l) => (l.a === x && l.b === y) || (l.a === y && l.b === x));
}

/** The graph as plain data for collectives: rank = index in `graph.hosts`, each cabled pair once. */
export function toConnectivity(graph: TopologyGraph): Connectivity {
  const rank = new Map(graph.hosts.map((h, i) => [h, i]));
  const keys = new Set<string>();
  const edges: [number, number][] = [];
  for (const l of graph.links) {
    const i = rank.get(l.a);
    const j = rank.get(l.b);
    if (i === undefined || j === undefined || i === j) continue;
    const e: [number, number] = i < j ? [i, j] : [j, i];
    const key = `${e[0]},${e[1]}`;
    if (keys.has(key)) continue;
    keys.add(key);
    edges.push(e);
  }
  edges.sort((p, q) => p[0] - q[0] || p[1] - q[1]);
  return { size: graph.hosts.length, edges };
}

/** A canonical text of the graph (sorted hosts and cables), equal on every host that sees the same cables. */
export function canonicalGraph(graph: TopologyGraph): string {
  const links = graph.links
    .map((l) =>
      `${l.a}:${l.aPort}` < `${l.b}:${l.bPort}`
        ? `${l.a}:${l.aPort}-${l.b}:${l.bPort}`
        : `${l.b}:${l.bPort}-${l.a}:${l.aPort}`,
    )
    .sort();
  return JSON.stringify({ hosts: [...graph.hosts].sort(), links });
}

/** Rebuilds a link list in canonical orientation (a:aPort < b:bPort) and sorted order, dropping duplicates. */
export function normalizeLinks(links: readonly Link[]): Link[] {
  const out = new Map<string, Link>();
  for (const l of links) {
    const flip = `${l.a}:${l.aPort}` > `${l.b}:${l.bPort}`;
    const n: Link = flip ? { ...l, a: l.b, aPort: l.bPort, b: l.a, bPort: l.aPort } : { ...l };
    const key = `${n.a}:${n.aPort}-${n.b}:${n.bPort}`;
    if (!out.has(key)) out.set(key, n);
  }
  return [...out.entries()].sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0)).map(([, l]) => l);
}
