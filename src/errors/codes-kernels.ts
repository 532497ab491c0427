import type { ErrorCategory } from './category.js';

/** Error codes raised by the kernels layer, each with its category. */
export const kernelsCodes = {
  KERNELS_UNSUPPORTED_TYPE: 'invalid_argument',
  KERNELS_BAD_SHAPE: 'invalid_argument',
  KERNELS_BAD_SLICE: 'invalid_argument',
  KERNELS_CONTEXT_FULL: 'invalid_argument',
  KERNELS_OUT_OF_MEMORY: 'system',
  KERNELS_BUILD_FAILED: 'system',
  KERNELS_WORKER_FAILED: 'internal',
  KERNELS_CLOSED: 'invalid_usage',
  KERNELS_NO_ADAPTER: 'system',
  KERNELS_DEVICE_LIMIT: 'invalid_argument',
  KERNELS_GPU_FAILED: 'system',
} as const satisfies Record<string, ErrorCategory>;
