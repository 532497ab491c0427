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
export {
  classify,
  route,
  relayRoutes,
  toRouting,
  findRing,
  diameter,
  hopsFrom,
  type Classification,
  type TopologyClass,
} from './classify.js';
export { findBridgeLoops, type BridgeLoop, type BridgeMembership } from './loops.js';
export { macModels, findMacModel, parseMachines, type MacModel, type PlannedMachine } from './machines.js';
export {
  planCabling,
  estimateAllReduce,
  cablesToGraph,
  assumedLink,
  type CablingPlan,
  type Cable,
  type PlannedTopology,
  type LinkAssumption,
} from './planner.js';
export {
  exportMlxHostfile,
  importMlxHostfile,
  type MlxHostfile,
  type MlxHost,
  type HostAddresses,
} from './hostfile.js';
export { drawShape, renderTopology, matrix } from './draw.js';
export {
  diagnose,
  hasErrors,
  formatFindings,
  type Finding,
  type Severity,
  type DoctorInput,
} from './doctor.js';
export { probeHost, runCommand, tandemVersion, type CommandRunner } from './probes/host.js';
export type { HostReport, NetInterface, RdmaDevice, RdmaPort, ThunderboltPort } from './probes/types.js';
export {
  parseThunderbolt,
  parseHardwarePorts,
  parseIfconfig,
  parseRdmaCtlStatus,
  parseIbvDevices,
  parseIbvDevinfo,
  matchThunderboltLinks,
} from './probes/macos.js';
export { readLinuxInterfaces, readLinuxRdma } from './probes/linux.js';
export { DiscoveryAgent, type AgentOptions } from './discovery/agent.js';
export { loadSecret, minSecretBytes } from './discovery/secret.js';
export { measureLink, whoIs, startMeasureServer, type LinkFigures } from './discovery/measure.js';
export { usableInterfaces, interfaceInfoFrom } from './discovery/interfaces.js';
export type { LocalLink, HostView } from './discovery/protocol.js';
export { assignAddresses, hostAddresses, addressCommands, type AddressedLink } from './addressing.js';
export {
  defaultConfigPath,
  readClusterConfig,
  writeClusterConfig,
  type ClusterConfig,
} from './cluster-config.js';
export { runInit, chooseAlgorithm, type InitOptions, type InitResult } from './init.js';
