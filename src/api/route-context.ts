import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { TandemError } from '../errors/index.js';
import type { Metrics } from './metrics.js';
import type { RequestTrace } from './request-trace.js';
import type { Scheduler } from './scheduler.js';
import type { ServedModel } from './served-model.js';

/** What a route handler gets: the parsed body, the loaded model, and the request's lifetime. */
export interface RouteContext {
  req: IncomingMessage;
  res: ServerResponse;
  /** The parsed JSON body (undefined for GET). */
  body: unknown;
  served: ServedModel;
  scheduler: Scheduler;
  metrics: Metrics;
  /** The request's timings and outcome, for its log line and the metrics. */
  trace: RequestTrace;
  /** Aborted when the client goes away before the answer is complete. */
  signal: AbortSignal;
}

export type RouteHandler = (ctx: RouteContext) => Promise<void>;

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

/** A request naming another model than the one served is a 404, as OpenAI answers an unknown model. */
export function checkModelName(served: ServedModel, model: string | undefined): void {
  if (model !== undefined && model !== served.name) {
    throw new TandemError(
      'API_NOT_FOUND',
      `the model '${model}' does not exist here; this server serves '${served.name}'`,
      {
        hint: `pass "model": "${served.name}" (GET /v1/models lists it)`,
        details: { param: 'model' },
      },
    );
  }
}

/** One id per completion (`chatcmpl-...`, `cmpl-...`), shared by all its chunks. */
export function completionId(prefix: string): string {
  return `${prefix}-${randomUUID().replaceAll('-', '')}`;
}

export function unixNow(): number {
  return Math.floor(Date.now() / 1000);
}
