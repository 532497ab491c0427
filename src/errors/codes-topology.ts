import type { ErrorCategory } from './category.js';

/** Error codes raised by the topology layer, each with its category. Keep sorted by prefix. */
export const topologyCodes = {
} as const satisfies Record<string, ErrorCategory>;
