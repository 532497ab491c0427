export { TandemError, isTandemError, exitCodeFor, type TandemErrorOptions } from './tandem-error.js';
export { errorCodes, codeTables, type ErrorCode } from './codes.js';
export { errorCategories, type ErrorCategory } from './category.js';
