/**
 * The communication a sharded model needs, implemented by the parallel layer over
 * collectives (the engine never imports them). Every rank of a group calls each method in
 * the same order with the same lengths. Implementations must reduce in a fixed order, so
 * every rank ends with bit-identical values and runs are reproducible.
 */
export interface ShardComm {
  /**
   * Sums `x` element-wise across the group, in place (tensor-parallel partial outputs of
   * attention and FFN; expert-parallel partial MoE outputs).
   */
  allReduceSum(x: Float32Array): Promise<void> | void;
  /**
   * Gathers vocabulary slices of the logits: `local` holds this rank's rows of the output
   * head; `full` receives every rank's rows in vocabulary order.
   */
  allGatherLogits(local: Float32Array, full: Float32Array): Promise<void> | void;
}

/** One node holds everything: nothing to exchange. */
export const singleNodeComm: ShardComm = {
  allReduceSum(): void {},
  allGatherLogits(local: Float32Array, full: Float32Array): void {
    if (local !== full) full.set(local);
  },
};
