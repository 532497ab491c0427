import { GEMM_TOKENS } from '../kernels/types.js';

/**
 * The GEMM's token lane group on x86 VNNI (kernels' gemmGroup): a micro-batch of a whole
 * number of groups leaves no lanes idle. A constant, not each node's kernels' own, since every
 * stage of a pipeline must cut a prompt alike (NEON's groups are 15: 32 is 2 of them and 2 over).
 */
const LANE_GROUP = 16;
/** Below two groups a micro-batch waits on memory for each weight tile it passes (docs/parallel.md). */
const MIN_PIECE = 2 * LANE_GROUP;
const MAX_PIECE = 256;

/**
 * The micro-batches (their token counts, in order) of an n-token prompt over `stages`: about
 * 2 per stage, each a whole number of lane groups and at least MIN_PIECE tokens, at most
 * MAX_PIECE, the last one taking a remainder too short for a GEMM of its own (a piece below
 * GEMM_TOKENS takes the kernels' one-token path and parts from one node's prefill in the last
 * bits). A prompt too short for two such pieces is cut into up to 2 per stage of at least
 * GEMM_TOKENS tokens. `asked`: that many pieces of equal size instead.
 */
export function microBatches(n: number, stages: number, asked?: number): number[] {
  const even = (count: number): number[] => {
    const m = Math.max(1, Math.min(n, count));
    return Array.from({ length: m }, (_, i) => Math.floor((n * (i + 1)) / m) - Math.floor((n * i) / m));
  };
  if (asked !== undefined) return even(asked);
  if (n < 2 * MIN_PIECE) return even(Math.min(2 * stages, Math.floor(n / GEMM_TOKENS)));
  const groups = Math.round(n / (2 * stages * LANE_GROUP));
  const size = Math.min(MAX_PIECE, Math.max(MIN_PIECE, groups * LANE_GROUP));
  const sizes: number[] = [];
  for (let left = n; left > 0;) {
    const take = left - size < GEMM_TOKENS ? left : size;
    sizes.push(take);
    left -= take;
  }
  return sizes;
}
