export { runDistributed, type RunDistributedOptions, type DistributedResult } from './distributed.js';
export { ClusterSession, type LoadOptions, type GenerateRequest, type ClusterResult } from './session.js';
export { launchLocalNodes, startingLine, type LaunchOptions, type LocalNodes } from './launcher.js';
export { startNode, type NodeAgentOptions } from './node-agent.js';
export {
  defaultNodePort,
  loadHostfile,
  parseAnyHostfile,
  parseHostfile,
  readHostfile,
  type HostEntry,
  type Hostfile,
} from './hostfile.js';
export { benchCluster, benchPrompt, type BenchClusterOptions, type BenchClusterRow } from './bench.js';
export {
  demoModel,
  runDemo,
  cacheDir,
  demoShape,
  demoShapeName,
  demoWarmupTokens,
  type DemoRun,
  type DemoOptions,
} from './demo.js';
export { runDistributedText, type DistributedTextOptions } from './run-text.js';
export { probeSpeed, nodeSpeeds } from './speed.js';
export { startCluster, type ClusterStartOptions, type StartedCluster } from './distributed.js';
export { ClusterSlotModel, RemoteSequence } from './cluster-slot-model.js';
export { ServingCluster, type ClusterEvent, type ClusterView, type MemberView } from './serving-cluster.js';
export { ClusterPort, CLUSTER_PORT } from './cluster-port.js';
export { joinCluster, REJOIN_MS, type JoinOptions } from './node-join.js';
export {
  discoverCluster,
  DiscoveryResponder,
  DISCOVERY_GROUP,
  DISCOVERY_PORT,
  type DiscoverOptions,
  type ResponderOptions,
} from './cluster-discovery.js';
export { resolveModelPath } from './model-path.js';
export { whySplitMayNotPay, type SplitFacts } from './split-verdict.js';
export { calibrate, calibrationPath, loadCalibration, saveCalibration } from './calibrate.js';
export {
  REBALANCE_MARGIN,
  rebalanceExperts,
  type RebalanceOptions,
  type RebalanceReport,
} from './expert-rebalance.js';
