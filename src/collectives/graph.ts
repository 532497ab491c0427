import { TandemError } from '../errors/index.js';

/**
 * Which rank pairs have a direct link: plain data, `size` ranks and undirected edges.
 * Any connected graph works; pairs without an edge are relayed along shortest paths.
 */
export interface Graph {
  size: number;
  edges: ReadonlyArray<readonly [number, number]>;
}

export type TopologyKind = 'mesh' | 'ring' | 'line' | 'star';

export function fullMeshGraph(size: number): Graph {
  const edges: [number, number][] = [];
  for (let i = 0; i < size; i++) for (let j = i + 1; j < size; j++) edges.push([i, j]);
  return { size, edges };
}

export function lineGraph(size: number): Graph {
  const edges: [number, number][] = [];
  for (let i = 0; i + 1 < size; i++) edges.push([i, i + 1]);
  return { size, edges };
}

export function ringGraph(size: number): Graph {
  const g = lineGraph(size);
  return size > 2 ? { size, edges: [...g.edges, [size - 1, 0]] } : g;
}

export function starGraph(size: number, hub = 0): Graph {
  const edges: [number, number][] = [];
  for (let i = 0; i < size; i++) if (i !== hub) edges.push([Math.min(hub, i), Math.max(hub, i)]);
  return { size, edges };
}

export function graphOf(kind: TopologyKind, size: number): Graph {
  switch (kind) {
    case 'mesh':
      return fullMeshGraph(size);
    case 'ring':
      return ringGraph(size);
    case 'line':
      return lineGraph(size);
    case 'star':
      return starGraph(size);
  }
}

/** Sorted neighbour lists; throws COLL_BAD_GRAPH on bad ranks, self loops or a disconnected graph. */
export function adjacency(g: Graph): number[][] {
  if (!Number.isInteger(g.size) || g.size < 1 || g.size > 65535) {
    throw new TandemError('COLL_BAD_GRAPH', `graph size must be an integer in 1..65535, got ${g.size}`, {
      hint: 'pass the number of ranks as size',
    });
  }
  const sets = Array.from({ length: g.size }, () => new Set<number>());
  for (const [a, b] of g.edges) {
    if (!Number.isInteger(a) || !Number.isInteger(b) || a < 0 || b < 0 || a >= g.size || b >= g.size || a === b) {
      throw new TandemError('COLL_BAD_GRAPH', `edge [${a}, ${b}] is not a link between two ranks of 0..${g.size - 1}`, {
        hint: 'list each link once as [rankA, rankB] with two different ranks below size',
      });
    }
    sets[a]?.add(b);
    sets[b]?.add(a);
  }
  const adj = sets.map((s) => [...s].sort((x, y) => x - y));
  const hops = distancesFrom(adj, 0);
  const unreachable = hops.findIndex((d) => d < 0);
  if (unreachable >= 0) {
    throw new TandemError('COLL_BAD_GRAPH', `rank ${unreachable} cannot reach rank 0 through the ${g.edges.length} links given`, {
      hint: 'add a link so that the graph is connected (relaying needs a path between every pair)',
    });
  }
  return adj;
}

function distancesFrom(adj: readonly number[][], src: number): number[] {
  const dist = new Array<number>(adj.length).fill(-1);
  dist[src] = 0;
  const queue = [src];
  for (let q = 0; q < queue.length; q++) {
    const u = queue[q] as number;
    for (const v of adj[u] ?? []) {
      if (dist[v] !== -1) continue;
      dist[v] = (dist[u] as number) + 1;
      queue.push(v);
    }
  }
  return dist;
}

/**
 * nextHop[src][dst]: the neighbour of `src` on a shortest path to `dst` (dst itself when
 * linked, src when src == dst). Ties go to the smallest neighbour, so every rank computes the
 * same routes.
 */
export function shortestRoutes(adj: readonly number[][]): number[][] {
  const n = adj.length;
  const dist = Array.from({ length: n }, (_, i) => distancesFrom(adj, i));
  return Array.from({ length: n }, (_, src) =>
    Array.from({ length: n }, (_, dst) => {
      if (src === dst) return src;
      const d = dist[dst]?.[src] as number;
      return (adj[src] ?? []).find((v) => dist[dst]?.[v] === d - 1) as number;
    }),
  );
}

/** The full path src -> ... -> dst along `routes`. */
export function routePath(routes: readonly number[][], src: number, dst: number): number[] {
  const path = [src];
  for (let at = src; at !== dst; ) {
    at = routes[at]?.[dst] as number;
    path.push(at);
  }
  return path;
}

export function isFullMesh(adj: readonly number[][]): boolean {
  return adj.every((nb) => nb.length === adj.length - 1);
}

/**
 * A cyclic order of all ranks where consecutive ranks (and last -> first) are linked, or
 * undefined if the graph has no Hamiltonian cycle. Tries 0,1,...,n-1 first (the common ring).
 * Search is bounded (backtracking on <= 16 ranks; larger graphs accept only the identity order).
 */
export function findRing(adj: readonly number[][]): number[] | undefined {
  const n = adj.length;
  const linked = (a: number, b: number): boolean => (adj[a] ?? []).includes(b);
  if (n <= 2) return Array.from({ length: n }, (_, i) => i);
  const identity = Array.from({ length: n }, (_, i) => i);
  if (identity.every((r, i) => linked(r, identity[(i + 1) % n] as number))) return identity;
  if (n > 16) return undefined;
  const order = [0];
  const used = new Array<boolean>(n).fill(false);
  used[0] = true;
  let budget = 200_000;
  const extend = (): boolean => {
    if (--budget < 0) return false;
    const last = order[order.length - 1] as number;
    if (order.length === n) return linked(last, 0);
    for (const v of adj[last] ?? []) {
      if (used[v]) continue;
      used[v] = true;
      order.push(v);
      if (extend()) return true;
      order.pop();
      used[v] = false;
    }
    return false;
  };
  return extend() ? order : undefined;
}

/** A rooted spanning tree: parent (-1 at the root) and children in a fixed order. */
export interface Tree {
  root: number;
  parent: number[];
  children: number[][];
}

/**
 * Log-depth binomial tree on a full mesh; on a partial graph, the breadth-first tree over
 * real links (so nothing is relayed).
 */
export function spanningTree(adj: readonly number[][], root: number): Tree {
  const n = adj.length;
  const parent = new Array<number>(n).fill(-1);
  const children = Array.from({ length: n }, () => [] as number[]);
  if (isFullMesh(adj)) {
    // binomial tree on ranks relative to root: v's parent clears v's lowest set bit.
    for (let v = 1; v < n; v++) {
      const p = v & (v - 1);
      parent[(v + root) % n] = (p + root) % n;
    }
  } else {
    const seen = new Array<boolean>(n).fill(false);
    seen[root] = true;
    const queue = [root];
    for (let q = 0; q < queue.length; q++) {
      const u = queue[q] as number;
      for (const v of adj[u] ?? []) {
        if (seen[v]) continue;
        seen[v] = true;
        parent[v] = u;
        queue.push(v);
      }
    }
  }
  for (let v = 0; v < n; v++) if ((parent[v] as number) >= 0) children[parent[v] as number]?.push(v);
  return { root, parent, children };
}

/** Ranks of `members` (world ranks, in sub-communicator order) and the links among them. */
export function inducedGraph(g: Graph, members: readonly number[]): Graph {
  const index = new Map(members.map((r, i) => [r, i]));
  const edges: [number, number][] = [];
  for (const [a, b] of g.edges) {
    const ia = index.get(a);
    const ib = index.get(b);
    if (ia !== undefined && ib !== undefined) edges.push([Math.min(ia, ib), Math.max(ia, ib)]);
  }
  return { size: members.length, edges };
}
