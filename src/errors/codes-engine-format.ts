import type { ErrorCategory } from './category.js';

/** Error codes raised by the model file readers and writers (src/engine/format), each with its category. */
export const engineFormatCodes = {
} as const satisfies Record<string, ErrorCategory>;
