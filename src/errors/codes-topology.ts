import type { ErrorCategory } from './category.js';

/** Error codes raised by the topology layer, each with its category. Keep sorted by prefix. */
export const topologyCodes = {
  TOPOLOGY_INVALID_GRAPH: 'invalid_argument',
  TOPOLOGY_NO_ROUTE: 'invalid_usage',
  TOPOLOGY_UNKNOWN_MACHINE: 'invalid_argument',
  TOPOLOGY_PLAN_IMPOSSIBLE: 'invalid_usage',
  TOPOLOGY_BAD_HOSTFILE: 'invalid_argument',
  TOPOLOGY_BAD_PROBE_OUTPUT: 'system',
  TOPOLOGY_DISCOVERY_TIMEOUT: 'timeout',
  TOPOLOGY_BAD_SECRET: 'invalid_argument',
  TOPOLOGY_ADDRESS_EXHAUSTED: 'invalid_argument',
  TOPOLOGY_APPLY_FAILED: 'system',
  TOPOLOGY_BAD_CONFIG: 'invalid_argument',
} as const satisfies Record<string, ErrorCategory>;
