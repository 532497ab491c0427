import type { ErrorCategory } from './category.js';

/** Error codes raised by the cluster layer, each with its category. Keep sorted by prefix. */
export const clusterCodes = {
  CLUSTER_AUTH: 'remote',
  CLUSTER_BAD_HOSTFILE: 'invalid_argument',
  CLUSTER_NODE_BUSY: 'remote',
  CLUSTER_NODE_FAILED: 'remote',
  CLUSTER_NODE_LOST: 'remote',
  CLUSTER_NO_PLACEMENT: 'system',
  CLUSTER_PROTOCOL: 'remote',
  CLUSTER_SLICE_CORRUPT: 'remote',
  CLUSTER_SPAWN: 'system',
  CLUSTER_TIMEOUT: 'timeout',
} as const satisfies Record<string, ErrorCategory>;
