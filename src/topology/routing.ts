import { isFullMesh } from './rank-graph.js';

/*
 * Routing over a rank graph given as sorted neighbour lists (`neighbourLists`): the one
 * routing library of tandem. The collectives forward traffic along these routes and the
 * topology tools (`route`, `relayRoutes`, `findRing`, `toRouting`) report them, over hosts
 * numbered by name.
 *
 * Tie-break rule: among the neighbours of a node that lie on a fewest-hop path to the
 * destination, the route takes the smallest-numbered one. Applied hop by hop this gives the
 * lexicographically smallest fewest-hop path, and every suffix of a route is the route of its
 * first node, so a next-hop table and whole paths agree. It depends only on the graph, so every
 * rank (every host) computes the same routes. Rings follow the same order: the
 * lexicographically smallest cycle starting at 0.
 */

/** Fewest hops from `src` to every rank; -1 where unreachable. */
export function hopCounts(adj: readonly number[][], src: number): number[] {
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

/** The next hop from `src` given every rank's hop count to the destination (`src` when there, -1 when unreachable). */
function nextHop(adj: readonly number[][], toDst: readonly number[], src: number): number {
  const d = toDst[src] as number;
  if (d <= 0) return d === 0 ? src : -1;
  return (adj[src] ?? []).find((v) => toDst[v] === d - 1) as number;
}

/**
 * nextHop[src][dst]: the neighbour of `src` on the route to `dst` (dst itself when linked,
 * src when src == dst, -1 when unreachable), by the tie-break rule above.
 */
export function shortestRoutes(adj: readonly number[][]): number[][] {
  const n = adj.length;
  const toDst = Array.from({ length: n }, (_, dst) => hopCounts(adj, dst));
  return Array.from({ length: n }, (_, src) =>
    Array.from({ length: n }, (_, dst) => nextHop(adj, toDst[dst] as number[], src)),
  );
}

/** The route src -> ... -> dst (both ends included) by the tie-break rule, or undefined when unreachable. */
export function shortestPath(adj: readonly number[][], src: number, dst: number): number[] | undefined {
  const toDst = hopCounts(adj, dst);
  if ((toDst[src] as number) < 0) return undefined;
  const path = [src];
  for (let at = src; at !== dst;) path.push((at = nextHop(adj, toDst, at)));
  return path;
}

/** The full path src -> ... -> dst along a table of `shortestRoutes` (dst must be reachable). */
export function routePath(routes: readonly number[][], src: number, dst: number): number[] {
  const path = [src];
  for (let at = src; at !== dst;) {
    at = routes[at]?.[dst] as number;
    path.push(at);
  }
  return path;
}

/** Steps the ring search may take: bounded, and counted (not timed) so every rank gives up alike. */
const RING_SEARCH_STEPS = 200_000;

/**
 * A cyclic order of all ranks where consecutive ranks (and last -> first) are linked, or
 * undefined if none is found. Backtracking from rank 0 over neighbours in ascending order, so
 * the answer is the lexicographically smallest such cycle (0,1,...,n-1 when that is one).
 * Two ranks or fewer are taken as a ring in rank order (ring algorithms run over them).
 * Gives up after RING_SEARCH_STEPS steps (enough for a few dozen ranks).
 */
export function findRing(adj: readonly number[][]): number[] | undefined {
  const n = adj.length;
  if (n <= 2) return Array.from({ length: n }, (_, i) => i);
  const order = [0];
  const used = new Array<boolean>(n).fill(false);
  used[0] = true;
  let budget = RING_SEARCH_STEPS;
  const extend = (): boolean => {
    if (--budget < 0) return false;
    const last = order[order.length - 1] as number;
    if (order.length === n) return (adj[last] ?? []).includes(0);
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
 * real links (so nothing is relayed), neighbours visited in ascending order.
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
