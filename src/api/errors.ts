import { TandemError, isTandemError } from '../errors/index.js';

/** The OpenAI error object: what every failed request (and a failed stream's last event) carries. */
export interface OpenAiErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** An error as HTTP answers it: status, extra headers (Retry-After) and the OpenAI body. */
export interface HttpError {
  status: number;
  headers: Record<string, string>;
  body: OpenAiErrorBody;
}

/** A 400 for a request field (`param` names it, as OpenAI's errors do: `messages[0].content`). */
export function badRequest(
  param: string | null,
  message: string,
  hint = 'see docs/serve.md for the fields each route takes',
): TandemError {
  return new TandemError('API_BAD_REQUEST', message, { hint, details: { param } });
}

/** A status with a Retry-After (429 queue full, 503 loading or shutting down). */
export function retryLater(
  code: 'API_QUEUE_FULL' | 'API_LOADING' | 'API_SHUTTING_DOWN',
  message: string,
  retryAfterS: number,
  hint: string,
): TandemError {
  return new TandemError(code, message, { hint, details: { retryAfterS } });
}

function body(message: string, type: string, param: string | null, code: string | null): OpenAiErrorBody {
  return { error: { message, type, param, code } };
}

/**
 * Translates what a handler threw into the OpenAI error shape and a status. Only the api
 * layer's codes have statuses of their own; the engine's user errors (a context too small,
 * a bad token id, a chat template that rejects the messages) are 400s; anything that is not
 * a TandemError is a bug and the only path to a 500.
 */
export function toHttpError(error: unknown): HttpError {
  if (!isTandemError(error)) {
    const message = error instanceof Error ? error.message : String(error);
    return {
      status: 500,
      headers: {},
      body: body(`internal error (a bug in tandem): ${message}`, 'server_error', null, 'internal_error'),
    };
  }
  const param = typeof error.details.param === 'string' ? error.details.param : null;
  const retryAfterS = typeof error.details.retryAfterS === 'number' ? error.details.retryAfterS : undefined;
  const retry: Record<string, string> =
    retryAfterS !== undefined ? { 'retry-after': String(retryAfterS) } : {};
  const message = `${error.message} (${error.hint})`;
  switch (error.code) {
    case 'API_AUTH':
      return {
        status: 401,
        headers: {},
        body: body(error.message, 'authentication_error', null, 'invalid_api_key'),
      };
    case 'API_CORS':
      return {
        status: 403,
        headers: {},
        body: body(message, 'permission_error', null, 'origin_not_allowed'),
      };
    case 'API_NOT_FOUND':
      return {
        status: 404,
        headers: {},
        body: body(error.message, 'invalid_request_error', param, 'not_found'),
      };
    case 'API_BODY_TOO_LARGE':
      return {
        status: 413,
        headers: {},
        body: body(message, 'invalid_request_error', null, 'request_too_large'),
      };
    case 'API_QUEUE_FULL':
      return { status: 429, headers: retry, body: body(message, 'rate_limit_error', null, 'queue_full') };
    case 'API_LOADING':
    case 'API_SHUTTING_DOWN':
      return {
        status: 503,
        headers: retry,
        body: body(
          message,
          'service_unavailable',
          null,
          error.code === 'API_LOADING' ? 'loading' : 'shutting_down',
        ),
      };
    default:
      break;
  }
  switch (error.category) {
    case 'invalid_argument':
    case 'invalid_usage':
      return {
        status: 400,
        headers: {},
        body: body(message, 'invalid_request_error', param, error.code.toLowerCase()),
      };
    case 'system':
    case 'remote':
    case 'timeout':
      return {
        status: 503,
        headers: { 'retry-after': '1' },
        body: body(message, 'service_unavailable', null, error.code.toLowerCase()),
      };
    case 'internal':
      return {
        status: 500,
        headers: {},
        body: body(message, 'server_error', null, error.code.toLowerCase()),
      };
  }
}

/** The error a request that is cut short gets (client gone, server stopping). */
export function cancelled(why: string): TandemError {
  return new TandemError('API_CANCELLED', `the request was cancelled: ${why}`, { hint: 'send it again' });
}
