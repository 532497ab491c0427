import type { ErrorCategory } from './category.js';
import { errorCodes, type ErrorCode } from './codes.js';

export interface TandemErrorOptions {
  /** What the user should do next: one fix-it sentence. */
  hint: string;
  /** Structured values involved (rank, key, offset...), for JSON output and tests. */
  details?: Record<string, unknown>;
  cause?: unknown;
}

/**
 * The one error type tandem throws for anything a user, a peer or the system can cause.
 * `message` says what failed and with which values; `hint` says what to do.
 * Programmer bugs use `assert`, never this.
 */
export class TandemError extends Error {
  readonly code: ErrorCode;
  readonly category: ErrorCategory;
  readonly hint: string;
  readonly details: Readonly<Record<string, unknown>>;

  constructor(code: ErrorCode, message: string, options: TandemErrorOptions) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'TandemError';
    this.code = code;
    this.category = errorCodes[code];
    this.hint = options.hint;
    this.details = options.details ?? {};
  }

  toJSON(): Record<string, unknown> {
    return {
      code: this.code,
      category: this.category,
      message: this.message,
      hint: this.hint,
      details: this.details,
    };
  }
}

export function isTandemError(value: unknown, code?: ErrorCode): value is TandemError {
  return value instanceof TandemError && (code === undefined || value.code === code);
}

/** Process exit code for a category: distinct per category so scripts can tell them apart. */
export function exitCodeFor(category: ErrorCategory): number {
  switch (category) {
    case 'invalid_argument':
      return 2;
    case 'invalid_usage':
      return 3;
    case 'system':
      return 4;
    case 'remote':
      return 5;
    case 'timeout':
      return 6;
    case 'internal':
      return 70;
  }
}
