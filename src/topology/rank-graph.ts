/**
 * Which rank pairs have a direct link: plain data, `size` ranks (0..size-1) and undirected
 * edges. The shape a communicator is created with (`toConnectivity` gives one for a cluster);
 * `routing.ts` finds routes, rings and trees over it.
 */
export interface RankGraph {
  size: number;
  edges: ReadonlyArray<readonly [number, number]>;
}

export function fullMeshGraph(size: number): RankGraph {
  const edges: [number, number][] = [];
  for (let i = 0; i < size; i++) for (let j = i + 1; j < size; j++) edges.push([i, j]);
  return { size, edges };
}

export function lineGraph(size: number): RankGraph {
  const edges: [number, number][] = [];
  for (let i = 0; i + 1 < size; i++) edges.push([i, i + 1]);
  return { size, edges };
}

export function ringGraph(size: number): RankGraph {
  const g = lineGraph(size);
  return size > 2 ? { size, edges: [...g.edges, [size - 1, 0]] } : g;
}

export function starGraph(size: number, hub = 0): RankGraph {
  const edges: [number, number][] = [];
  for (let i = 0; i < size; i++) if (i !== hub) edges.push([Math.min(hub, i), Math.max(hub, i)]);
  return { size, edges };
}

/**
 * Neighbour lists, each sorted ascending (the routing tie-break relies on the order); a pair
 * listed twice counts once. Edges must join two different ranks below `size` (collectives'
 * `adjacency` checks that for user input; `toConnectivity` only makes such edges).
 */
export function neighbourLists(g: RankGraph): number[][] {
  const sets = Array.from({ length: g.size }, () => new Set<number>());
  for (const [a, b] of g.edges) {
    sets[a]?.add(b);
    sets[b]?.add(a);
  }
  return sets.map((s) => [...s].sort((x, y) => x - y));
}

export function isFullMesh(adj: readonly number[][]): boolean {
  return adj.every((nb) => nb.length === adj.length - 1);
}

/** Ranks of `members` (ranks of `g`, in sub-group order) and the links among them. */
export function inducedGraph(g: RankGraph, members: readonly number[]): RankGraph {
  const index = new Map(members.map((r, i) => [r, i]));
  const edges: [number, number][] = [];
  for (const [a, b] of g.edges) {
    const ia = index.get(a);
    const ib = index.get(b);
    if (ia !== undefined && ib !== undefined) edges.push([Math.min(ia, ib), Math.max(ia, ib)]);
  }
  return { size: members.length, edges };
}
