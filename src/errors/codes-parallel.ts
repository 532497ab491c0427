import type { ErrorCategory } from './category.js';

/** Error codes raised by the parallel layer, each with its category. Keep sorted by prefix. */
export const parallelCodes = {
  PAR_BAD_PLAN: 'invalid_argument',
  PAR_BAD_PROFILE: 'invalid_argument',
  PAR_EXCHANGE: 'remote',
  PAR_NO_FIT: 'invalid_argument',
  PAR_NOT_CALIBRATED: 'invalid_argument',
  PAR_PEER_LOST: 'remote',
  PAR_TRAIN_DIVERGED: 'internal',
  PAR_TRAIN_NODE_LOST: 'remote',
  PAR_UNKNOWN_ENGINE: 'invalid_argument',
  PAR_UNKNOWN_LINK: 'invalid_argument',
  PAR_UNKNOWN_MODEL: 'invalid_argument',
  PAR_UNKNOWN_QUANT: 'invalid_argument',
  PAR_WIRE: 'invalid_argument',
} as const satisfies Record<string, ErrorCategory>;
