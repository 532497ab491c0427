/** How an error is to be treated at the edges: CLI exit codes and HTTP statuses derive from it. */
export type ErrorCategory =
  'invalid_argument' | 'invalid_usage' | 'system' | 'remote' | 'timeout' | 'internal';

export const errorCategories: readonly ErrorCategory[] = [
  'invalid_argument',
  'invalid_usage',
  'system',
  'remote',
  'timeout',
  'internal',
];
