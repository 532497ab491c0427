// Data-parallel training over tandem's collectives (the engine's loop, gradients summed over ranks).
export { BUCKET_VALUES, CollectiveGradSync, type SyncTimes } from './grad-sync.js';
export { ShardedGradSync } from './sharded-sync.js';
export { trainRank, type OptimizerSplit, type RankOptions } from './data-parallel.js';
