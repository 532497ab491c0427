export {
  buildPlan,
  describePlan,
  parallelKinds,
  proportionalCounts,
  type ParallelKind,
  type ExpertSets,
  type ParallelPlan,
  type PlanOptions,
  type RankPlan,
} from './plan.js';
export { commBytes, shardBytes, formatBytes, parseBytes, type MemoryOptions } from './memory.js';
export { placeModel, type NodeSpec, type PlaceOptions, type Placement } from './placement.js';
export { CollectiveShardComm, CommMeter, allReduceWireBytes, type ShardCommOptions } from './shard-comm.js';
export { checkWire, wireFormats, type WireFormat } from './wire.js';
export {
  generateOnRank,
  type RankContext,
  type RankGenerateOptions,
  type RankMetrics,
  type RankResult,
} from './runner.js';
export { loadRank, stageShards, type LoadRankOptions, type LoadedRank } from './rank.js';
export type { ShardModel } from './shard-model.js';
export { GpuShardModel, refuseGpuShard, type GpuShardOptions } from './gpu-shard-model.js';
export { TpExchange, type TpExchangeOptions } from './tp-exchange.js';
export { exchangeBufferBytes, usesDirectExchange } from '../collectives/index.js';
export {
  forwardBatchOnRank,
  forwardMixedOnRank,
  forwardOnRank,
  logitsRank,
  gemmGroupOf,
  runsMixedInOnePass,
} from './serving-step.js';
export { chooseParallel, predictStepSeconds, type AutoChoice } from './auto.js';
export * from './forecast/index.js';
export {
  balanceExperts,
  balanceLayers,
  contiguousExperts,
  contiguousLayers,
  copyFor,
  layerExpertSets,
  layerReplicas,
  layersMaxNodeShare,
  maxNodeShare,
  placementOf,
  type ExpertPlacement,
} from './expert-balance.js';
export {
  checkProfile,
  EXPERT_PROFILE_FORMAT,
  EXPERT_ROOM,
  expertSetsFromProfile,
  parseExpertProfile,
  placeByProfile,
  profileFromCounts,
  profileFromRanks,
  profileOfModel,
  readExpertProfile,
  writeExpertProfile,
  type ExpertProfile,
  type RankExpertCounts,
} from './expert-profile.js';
export { RankExperts, type ReplaceBudget } from './expert-replace.js';
