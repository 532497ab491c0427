import type { ErrorCategory } from './category.js';

/** Error codes raised by the kernels layer, each with its category. */
export const kernelsCodes = {
} as const satisfies Record<string, ErrorCategory>;
