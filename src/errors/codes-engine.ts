import type { ErrorCategory } from './category.js';

/** Error codes raised by the engine layer, each with its category. Keep sorted by prefix. */
export const engineCodes = {
} as const satisfies Record<string, ErrorCategory>;
