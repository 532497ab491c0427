import type { ErrorCategory } from './category.js';

/** Error codes raised by the parallel layer, each with its category. Keep sorted by prefix. */
export const parallelCodes = {
} as const satisfies Record<string, ErrorCategory>;
