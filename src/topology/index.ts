export {
  makeGraph,
  adjacency,
  linksBetween,
  toConnectivity,
  canonicalGraph,
  normalizeLinks,
  type Link,
  type LinkKind,
  type TopologyGraph,
  type Connectivity,
} from './model.js';
export { classify, route, relayRoutes, findRing, diameter, hopsFrom, type Classification, type TopologyClass } from './classify.js';
export { findBridgeLoops, type BridgeLoop, type BridgeMembership } from './loops.js';
export { macModels, findMacModel, parseMachines, type MacModel, type PlannedMachine } from './machines.js';
export { planCabling, estimateAllReduce, cablesToGraph, type CablingPlan, type Cable, type PlannedTopology } from './planner.js';
export { exportMlxHostfile, importMlxHostfile, type MlxHostfile, type MlxHost, type HostAddresses } from './hostfile.js';
export { drawShape, renderTopology, matrix } from './draw.js';
