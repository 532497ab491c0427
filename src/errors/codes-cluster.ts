import type { ErrorCategory } from './category.js';

/** Error codes raised by the cluster layer, each with its category. Keep sorted by prefix. */
export const clusterCodes = {
} as const satisfies Record<string, ErrorCategory>;
