import type { ErrorCategory } from './category.js';

/** Error codes raised by the collectives layer, each with its category. Keep sorted by prefix. */
export const collectivesCodes = {
  COLL_ABORTED: 'invalid_usage',
  COLL_BAD_ARGUMENT: 'invalid_argument',
  COLL_BAD_GRAPH: 'invalid_argument',
  COLL_BAD_MESSAGE: 'remote',
  COLL_MISMATCH: 'invalid_usage',
  COLL_PEER_LOST: 'remote',
  COLL_RENDEZVOUS: 'system',
  COLL_TIMEOUT: 'timeout',
} as const satisfies Record<string, ErrorCategory>;
