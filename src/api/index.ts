// The api layer's public surface: the OpenAI-compatible HTTP server over one loaded model.
export { ApiServer, type ApiServerOptions } from './http-server.js';
export {
  loadServedModel,
  servingParts,
  defaultModelName,
  type ServedModel,
  type LocalServedModel,
  type LoadServedOptions,
} from './served-model.js';
export { toHttpError, type OpenAiErrorBody } from './errors.js';
export { loadClusterServedModel, type ClusterServeOptions } from './cluster-served-model.js';
export type { Metrics } from './metrics.js';
export {
  singleProcessSource,
  type ClusterMetricsSource,
  type ClusterMetricsSnapshot,
  type MemberMetrics,
  type LinkMetrics,
} from './cluster-metrics.js';
