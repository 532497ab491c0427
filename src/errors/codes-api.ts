import type { ErrorCategory } from './category.js';

/**
 * Error codes raised by the HTTP API layer, each with its category. The HTTP status each one
 * answers with is decided in src/api/errors.ts. Keep sorted by prefix.
 */
export const apiCodes = {
  API_AUTH: 'invalid_usage',
  API_BAD_REQUEST: 'invalid_argument',
  API_BODY_TOO_LARGE: 'invalid_argument',
  API_CANCELLED: 'remote',
  API_CORS: 'invalid_usage',
  API_LOADING: 'system',
  API_NOT_FOUND: 'invalid_argument',
  API_QUEUE_FULL: 'system',
  API_SHUTTING_DOWN: 'system',
} as const satisfies Record<string, ErrorCategory>;
