import type { Algorithm } from './call.js';
import type { CollectiveOp } from './header.js';

/** What the choice of algorithm looks at besides the operation and its size. */
export interface TopologyFacts {
  size: number;
  /** Every pair linked directly. */
  fullMesh: boolean;
  /** The links contain a cycle through every rank (ring algorithms need no relays). */
  hasRing: boolean;
}

const SMALL = 16 * 1024;
const MEDIUM = 256 * 1024;
/**
 * rhd's range on a power-of-two full mesh of 4+ ranks: there it moves the ring's bytes in
 * log2(n) steps instead of n - 1 (other sizes fold the extra ranks' whole vectors in and out,
 * so they stay at MEDIUM). Up to 2 MiB rhd is the faster of the two over shm and tcp; at
 * 4 MiB the ring is (docs/collectives.md, "Measured facts behind the constants").
 */
const RHD_POW2 = 2 * 1024 * 1024;

/**
 * The algorithm for one call, from the operation, its bytes (per rank input for all-reduce,
 * reduce-scatter and broadcast; output for all-gather) and the topology. Every rank computes
 * the same answer from the same call, so no agreement round is needed.
 *
 * - full mesh: mesh for small messages (one step); rhd for medium ones on 4+ ranks
 *   (log-depth; up to RHD_POW2 on a power of two); ring for large ones (bandwidth-optimal). A 2-rank all-reduce stays mesh up
 *   to MEDIUM: each rank then sends as many bytes as the ring would, in one step instead of
 *   two, so it is faster over shm and tcp (docs/collectives.md, "Algorithms").
 * - a ring of links: tree (over real links) for small, ring for large.
 * - anything else (line, star, partial): tree over real links; all-to-all is relayed.
 * - q8 wire: never rhd (mesh, ring or tree as above).
 */
export function chooseAlgorithm(op: CollectiveOp, bytes: number, t: TopologyFacts, q8: boolean): Algorithm {
  if (t.size <= 1 || op === 'all-to-all' || op === 'barrier' || op === 'send-recv') return 'mesh';
  if (q8) return t.fullMesh && bytes <= MEDIUM ? 'mesh' : t.fullMesh || t.hasRing ? 'ring' : 'tree'; // no rhd for q8
  if (t.fullMesh) {
    if (op === 'broadcast') return bytes <= MEDIUM ? (t.size <= 4 ? 'mesh' : 'tree') : 'ring';
    if (bytes <= SMALL) return t.size <= 8 ? 'mesh' : 'rhd';
    if (t.size === 2 && op === 'all-reduce' && bytes <= MEDIUM) return 'mesh';
    const pow2 = (t.size & (t.size - 1)) === 0;
    if (bytes <= (pow2 ? RHD_POW2 : MEDIUM) && t.size >= 4 && op !== 'all-gather') return 'rhd';
    return 'ring';
  }
  if (t.hasRing && bytes > SMALL) return 'ring';
  return 'tree';
}
