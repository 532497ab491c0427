import { TandemError, type ErrorCode } from '../../errors/index.js';

/**
 * A model-format error that names the file and the field at fault (`details.field`), so a
 * test or a user can tell which part of a file is broken.
 */
export function formatError(
  code: ErrorCode,
  file: string,
  field: string,
  message: string,
  hint: string,
  details: Record<string, unknown> = {},
): TandemError {
  return new TandemError(code, `${file}: ${field}: ${message}`, {
    hint,
    details: { file, field, ...details },
  });
}

export const REGENERATE_HINT =
  'the file is damaged or not what it claims to be; re-download or re-convert it';
