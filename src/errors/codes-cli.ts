import type { ErrorCategory } from './category.js';

/** Error codes raised by the command line, each with its category. */
export const cliCodes = {
  CLI_USAGE: 'invalid_usage',
  CLI_UNKNOWN_COMMAND: 'invalid_usage',
} as const satisfies Record<string, ErrorCategory>;
