import type { ErrorCategory } from './category.js';

/** Error codes raised by the fabric layer, each with its category. Keep sorted by prefix. */
export const fabricCodes = {
  FABRIC_AUTH_FAILED: 'remote',
  FABRIC_CLOSED: 'invalid_usage',
  FABRIC_CONNECT_FAILED: 'system',
  FABRIC_INVALID_REQUEST: 'invalid_argument',
  FABRIC_KEY_EXHAUSTED: 'system',
  FABRIC_PROVIDER_UNAVAILABLE: 'system',
  FABRIC_QUEUE_FULL: 'invalid_usage',
  FABRIC_SHM_FAILED: 'system',
  FABRIC_WAIT_TIMEOUT: 'timeout',
  FABRIC_WORK_FAILED: 'remote',
} as const satisfies Record<string, ErrorCategory>;
