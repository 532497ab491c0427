/**
 * Collectives benchmark (nccl-tests style): the implementation lives in
 * src/collectives/bench.ts so that `tandem bench collectives` may import it.
 */
export * from '../src/collectives/bench.js';
