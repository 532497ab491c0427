import type { GroupSum } from './leaves.js';

/**
 * What a caller needs of one row's logits: all of them, only their argmax (the lowest id
 * holding the largest logit, as a greedy sampler picks), or nothing (a prompt piece before
 * the last, whose logits are dropped).
 */
export type LogitsNeed = 'logits' | 'argmax' | 'none';

/**
 * A forward's answer for one row, as far as the caller's need of it asks: its logits; for
 * an 'argmax' row its token id instead (greedyPick of the logits); undefined only for a
 * 'none' row. A model may always answer the logits (one in the caller's process does: they
 * cost nothing to hand over); a cluster's answers only what crosses the wire.
 */
export type RowResult = Float32Array | number | undefined;

/**
 * The communication a sharded model needs, implemented by the parallel layer over
 * collectives (the engine never imports them). Every rank of a group calls each method in
 * the same order with the same lengths. Implementations must reduce in a fixed order, so
 * every rank ends with bit-identical values and runs are reproducible.
 */
export interface ShardComm {
  /**
   * Sums `x` element-wise across the group, in place (tensor-parallel partial outputs of
   * attention and FFN; expert-parallel MoE outputs). With `group` (exact row-parallel sums,
   * leaves.ts), x holds this rank's `group.counts[rank]` pieces of m values each, [pieces, m],
   * and x[0, m) receives the sum of every rank's pieces in the order of `group.tree`.
   */
  allReduceSum(x: Float32Array, group?: GroupSum): Promise<void> | void;
  /**
   * Gathers vocabulary slices of the logits: `local` holds this rank's rows of the output
   * head; `full` receives every rank's rows in vocabulary order.
   */
  allGatherLogits(local: Float32Array, full: Float32Array): Promise<void> | void;
  /**
   * What the next allGatherLogits calls must give, one need per call in call order
   * (replacing any list not used up): 'logits' every logit; 'argmax' each rank's best (value,
   * id) alone, `full` -Infinity elsewhere, so its argmax is the whole row's; 'none' nothing
   * (`full` is left as it was). Calls past the list gather as the comm was built to. Every
   * rank of the group is given the same list, so the gathers still pair up.
   */
  planLogits?(needs: readonly LogitsNeed[]): void;
  /**
   * A pass over the shard's layers begins (Model.forwardLayers): an implementation that
   * feeds each rank's rounding error into its next part (f16/q8 wires) starts afresh.
   */
  beginForward?(): void;
  /**
   * Present when the routed experts are spread whole over the group (expert parallel): the
   * MoE layer then sends tokens to their experts through it instead of running the experts
   * it holds on every token.
   */
  readonly experts?: ExpertDispatch | undefined;
}

/**
 * Sums out[0, m) across the group, in place: from this shard's pieces of a row-parallel
 * projection when its group adds those (`leaves.group`, leaves.ts; out then holds
 * [pieces, m]), else out[0, m) as one part.
 */
export async function reduceAcross(
  comm: ShardComm,
  out: Float32Array,
  m: number,
  leaves?: { group?: GroupSum; pieces: readonly unknown[] },
): Promise<void> {
  const group = leaves?.group;
  const p = group
    ? comm.allReduceSum(out.subarray(0, leaves.pieces.length * m), group)
    : comm.allReduceSum(out.subarray(0, m));
  if (p) await p;
}

/** Runs routed expert `expert` (held by this rank) on rows [m, width] into out [m, width]. */
export type RunExpert = (expert: number, rows: Float32Array, out: Float32Array, m: number) => void;

/**
 * Runs this rank's experts on every row a dispatch brought, in one call (a GPU records them
 * into one submission): xs [total, width] grouped by expert, segment i expert experts[i]
 * (ascending) on rows [starts[i], starts[i + 1]), each segment's rows those RunExpert would get,
 * in the same order; the outputs go to ys [total, width] alike.
 */
export interface RunExperts {
  batch(experts: Int32Array, starts: Int32Array, xs: Float32Array, ys: Float32Array): Promise<void>;
}

/** One rank's part of an expert dispatch: the batch's rows and what this rank routed its share to. */
export interface ExpertRequest {
  /**
   * Every token's hidden row [n, width], the same on every rank of the group: an expert runs
   * on its own rank's copy, so only the routing and the outputs travel.
   */
  rows: Float32Array;
  n: number;
  /** The experts of this rank's share (share(n)) [m, used], ascending token order, and their weights. */
  ids: Int32Array;
  weights: Float32Array;
  used: number;
  width: number;
  /** The model layer (experts may be placed per layer); default 0. */
  layer?: number;
  /**
   * The whole batch's choices and weights [n, used] as this rank routed them, when the
   * dispatch routes this batch locally (ExpertDispatch.routesLocally); else absent.
   */
  routing?: { ids: Int32Array; weights: Float32Array };
}

/** A whole batch's routing and expert outputs after a dispatch, the same on every rank. */
export interface ExpertOutputs {
  /** Every token's choices and their weights [n, used] (a slot without an expert: -1). */
  ids: Int32Array;
  weights: Float32Array;
  /** The expert outputs; choice (t, j)'s row [width] starts at y[at[t * used + j]] (-1: no expert). */
  y: Float32Array;
  at: Int32Array;
}

/**
 * Expert parallel. Every rank of the group holds the same hidden states; a batch of n tokens
 * is cut into contiguous shares, one per rank, in rank order. Each rank routes its share and
 * hands the routing to `dispatch`; every rank then combines every token from the outputs.
 */
export interface ExpertDispatch {
  /** This rank's share [start, end) of a batch of n tokens (every rank calls with the same n). */
  share(n: number): { start: number; end: number };
  /**
   * Whether every rank routes a batch of n tokens whole itself and passes it as
   * `request.routing` (the same answer on every rank for the same n): small batches (decode
   * steps), while the group's routings have agreed, so that no routing travels.
   */
  routesLocally?(n: number): boolean;
  /**
   * Collective. Shares every rank's routing with the group (or, routed locally, checks that
   * every rank's is the same), runs this rank's experts on the
   * rows routed to them (`run` once per expert that got rows, ascending expert id, with its
   * rows in ascending token order of the batch: exactly the rows, in the order, one node would
   * run it on) and shares their outputs; resolves to the whole batch's routing and outputs.
   * The result is valid until the next call. With a RunExperts, its `batch` runs every
   * expert's rows at once instead.
   */
  dispatch(request: ExpertRequest, run: RunExpert | RunExperts): Promise<ExpertOutputs>;
}

/** One node holds everything: nothing to exchange. */
export const singleNodeComm: ShardComm = {
  allReduceSum(): void {},
  allGatherLogits(local: Float32Array, full: Float32Array): void {
    if (local !== full) full.set(local);
  },
};
