import type { ErrorCategory } from './category.js';

/** Error codes shared by every layer, each with its category. */
export const coreCodes = {
  INTERNAL: 'internal',
  INVALID_ARGUMENT: 'invalid_argument',
  ABORTED: 'invalid_usage',
  TIMEOUT: 'timeout',
} as const satisfies Record<string, ErrorCategory>;
