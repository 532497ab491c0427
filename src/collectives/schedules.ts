/**
 * Which chunk goes to which rank at each step, as pure functions: the algorithms in
 * `all-reduce-*.ts` etc. only execute these plans. Chunk indices refer to a partition of the
 * data into as many chunks as the algorithm has participants (see chunks.ts).
 */

export interface RingStep {
  /** chunk index sent to the next position */
  send: number;
  /** chunk index received from the previous position (reduced in, or copied for all-gather) */
  recv: number;
}

const mod = (a: number, n: number): number => ((a % n) + n) % n;

/**
 * Ring reduce-scatter at ring position `p` of `n`: n-1 steps; afterwards position p holds the
 * fully reduced chunk p. Chunk c starts at position c+1 and travels once around the ring,
 * so its reduction order is fixed: (c+1), (c+2), ..., c.
 */
export function ringReduceScatterSteps(n: number, p: number): RingStep[] {
  return Array.from({ length: Math.max(0, n - 1) }, (_, s) => ({
    send: mod(p - s - 1, n),
    recv: mod(p - s - 2, n),
  }));
}

/** Ring all-gather at position p: starts holding chunk p, after n-1 steps holds all. */
export function ringAllGatherSteps(n: number, p: number): RingStep[] {
  return Array.from({ length: Math.max(0, n - 1) }, (_, s) => ({
    send: mod(p - s, n),
    recv: mod(p - s - 1, n),
  }));
}

/** How a rank takes part in recursive halving-doubling on n ranks (any n). */
export interface RhdPlan {
  /** Largest power of two <= n: the number of virtual ranks in the halving/doubling core. */
  p: number;
  /** 'extra' ranks fold their data into `foldPartner` first and get the result back at the end. */
  role: 'extra' | 'folded' | 'plain';
  foldPartner: number;
  /** Virtual rank in the core, -1 for extra ranks. */
  virtual: number;
  /** Halving steps in order; the doubling (all-gather) steps are the same in reverse. */
  steps: RhdStep[];
}

export interface RhdStep {
  /** Real rank of the partner. */
  partner: number;
  /** Chunk range [lo, hi) this rank keeps (reduces into) at this step. */
  keep: [number, number];
  /** Chunk range [lo, hi) this rank sends. */
  give: [number, number];
}

export function rhdPlan(n: number, rank: number): RhdPlan {
  let p = 1;
  while (p * 2 <= n) p *= 2;
  const rem = n - p;
  const toReal = (v: number): number => (v < rem ? 2 * v + 1 : v + rem);
  if (rank < 2 * rem && rank % 2 === 0)
    return { p, role: 'extra', foldPartner: rank + 1, virtual: -1, steps: [] };
  const role = rank < 2 * rem ? 'folded' : 'plain';
  const v = rank < 2 * rem ? rank >> 1 : rank - rem;
  const steps: RhdStep[] = [];
  let lo = 0;
  let hi = p;
  for (let d = p >> 1; d >= 1; d >>= 1) {
    const mid = (lo + hi) >> 1;
    const upper = (v & d) !== 0;
    const keep: [number, number] = upper ? [mid, hi] : [lo, mid];
    const give: [number, number] = upper ? [lo, mid] : [mid, hi];
    steps.push({ partner: toReal(v ^ d), keep, give });
    [lo, hi] = keep;
  }
  return { p, role, foldPartner: role === 'folded' ? rank - 1 : -1, virtual: v, steps };
}

/** Real rank of every virtual rank of an RHD core (the owner of each chunk after halving). */
export function rhdOwners(n: number): number[] {
  const { p } = rhdPlan(n, n - 1);
  const rem = n - p;
  return Array.from({ length: p }, (_, v) => (v < rem ? 2 * v + 1 : v + rem));
}

export interface PairwiseStep {
  readonly to: number;
  readonly from: number;
}

const pairwise = new Map<number, readonly PairwiseStep[]>();

/**
 * Pairwise all-to-all order: at step s (1..n-1) rank r sends to r+s and receives from r-s.
 * Computed once per (n, rank): small calls take it on every call.
 */
export function pairwiseSteps(n: number, rank: number): readonly PairwiseStep[] {
  const key = n * 65536 + rank;
  let out = pairwise.get(key);
  if (out === undefined) {
    const steps: PairwiseStep[] = [];
    for (let i = 0; i < n - 1; i++)
      steps.push(Object.freeze({ to: mod(rank + i + 1, n), from: mod(rank - i - 1, n) }));
    pairwise.set(key, (out = Object.freeze(steps)));
  }
  return out;
}
