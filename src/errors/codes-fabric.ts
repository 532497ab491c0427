import type { ErrorCategory } from './category.js';

/** Error codes raised by the fabric layer, each with its category. Keep sorted by prefix. */
export const fabricCodes = {
} as const satisfies Record<string, ErrorCategory>;
