import { neighbourLists } from '../topology/rank-graph.js';
import { hopCounts } from '../topology/routing.js';
import type { Wiring } from './session.js';

/**
 * The pairs of `unlinked` (members whose link went down) that are both among `clients`, as
 * rank pairs [lower, higher] of that order.
 */
export function unlinkedRanks<T>(
  clients: readonly T[],
  unlinked: readonly (readonly [T, T])[],
): [number, number][] {
  const out: [number, number][] = [];
  for (const [a, b] of unlinked) {
    const x = clients.indexOf(a);
    const y = clients.indexOf(b);
    if (x < 0 || y < 0) continue;
    const pair: [number, number] = x < y ? [x, y] : [y, x];
    if (!out.some(([p, q]) => p === pair[0] && q === pair[1])) out.push(pair);
  }
  return out;
}

/**
 * How `size` ranks are linked when the pairs `cut` are not: every other pair, and the rendezvous
 * root, the lowest rank still linked to all (the rendezvous keeps its connection to each rank
 * as a link). Undefined when the ranks cannot relay around the cut: fewer than 3, no rank
 * linked to all, or a rank the links left do not reach.
 */
export function relayWiring(size: number, cut: readonly (readonly [number, number])[]): Wiring | undefined {
  if (size < 3) return undefined;
  const isCut = (a: number, b: number): boolean =>
    cut.some(([x, y]) => (x === a && y === b) || (x === b && y === a));
  const edges: [number, number][] = [];
  for (let a = 0; a < size; a++) for (let b = a + 1; b < size; b++) if (!isCut(a, b)) edges.push([a, b]);
  const adj = neighbourLists({ size, edges });
  const root = adj.findIndex((n) => n.length === size - 1);
  if (root < 0 || hopCounts(adj, root).some((d) => d < 0)) return undefined;
  return { edges, root };
}
