// Data-parallel training over tandem's collectives (the engine's loop, gradients all-reduced).
export { BUCKET_VALUES, CollectiveGradSync, type SyncTimes } from './grad-sync.js';
export { trainRank, type RankOptions } from './data-parallel.js';
