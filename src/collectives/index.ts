export { Communicator, type CallOptions, type AllReduceOptions } from './communicator.js';
export { createCommunicator, type CommunicatorOptions } from './create-communicator.js';
export { createLocalWorld } from './local-world.js';
export { algorithms, type Algorithm } from './call.js';
export { chunkRanges, type Range } from './chunks.js';
export { graphOf, adjacency, type Graph, type TopologyKind } from './graph.js';
export { fullMeshGraph, ringGraph, lineGraph, starGraph } from '../topology/rank-graph.js';
export { shortestRoutes, routePath } from '../topology/routing.js';
export { unreachablePair, type Rendezvous } from './rendezvous.js';
export { chooseAlgorithm } from './select.js';
export { linkBufferBytes } from './router/index.js';
export * from './one-sided/index.js';
/** The fabric under a communicator as the layers above name and count it (providers, the memory a device and a connection take). */
export { fabricFootprint, type FabricFootprint, type ProviderName } from '../fabric/index.js';
