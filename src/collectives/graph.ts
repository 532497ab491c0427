import { TandemError } from '../errors/index.js';
import {
  fullMeshGraph,
  lineGraph,
  neighbourLists,
  ringGraph,
  starGraph,
  type RankGraph,
} from '../topology/rank-graph.js';
import { hopCounts } from '../topology/routing.js';

/**
 * Which rank pairs have a direct link (topology's rank graph). Any connected graph works;
 * pairs without an edge are relayed along the routes of `topology/routing.ts`.
 */
export type Graph = RankGraph;

export type TopologyKind = 'mesh' | 'ring' | 'line' | 'star';

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
  for (const [a, b] of g.edges) {
    if (
      !Number.isInteger(a) ||
      !Number.isInteger(b) ||
      a < 0 ||
      b < 0 ||
      a >= g.size ||
      b >= g.size ||
      a === b
    ) {
      throw new TandemError(
        'COLL_BAD_GRAPH',
        `edge [${a}, ${b}] is not a link between two ranks of 0..${g.size - 1}`,
        {
          hint: 'list each link once as [rankA, rankB] with two different ranks below size',
        },
      );
    }
  }
  const adj = neighbourLists(g);
  const unreachable = hopCounts(adj, 0).findIndex((d) => d < 0);
  if (unreachable >= 0) {
    throw new TandemError(
      'COLL_BAD_GRAPH',
      `rank ${unreachable} cannot reach rank 0 through the ${g.edges.length} links given`,
      {
        hint: 'add a link so that the graph is connected (relaying needs a path between every pair)',
      },
    );
  }
  return adj;
}
