export { createCommunicator, Communicator, type CommunicatorOptions, type CallOptions, type AllReduceOptions } from './communicator.js';
export { createLocalWorld } from './local-world.js';
export { algorithms, type Algorithm } from './call.js';
export { chunkRanges, type Range } from './chunks.js';
export { graphOf, adjacency, type Graph, type TopologyKind } from './graph.js';
export { fullMeshGraph, ringGraph, lineGraph, starGraph } from '../topology/rank-graph.js';
export { shortestRoutes, routePath } from '../topology/routing.js';
export type { Rendezvous } from './rendezvous.js';
export { chooseAlgorithm } from './select.js';
