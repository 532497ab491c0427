import type { ErrorCategory } from './category.js';

/** Error codes raised by the collectives layer, each with its category. Keep sorted by prefix. */
export const collectivesCodes = {
} as const satisfies Record<string, ErrorCategory>;
