import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { TandemError } from '../errors/index.js';
import { silentLogger } from '../util/log.js';
import { chatCompletions } from './chat.js';
import { completions } from './completions.js';
import { badRequest, retryLater, toHttpError } from './errors.js';
import { detokenize, modelList, tokenize } from './info-routes.js';
import { clusterViewSource, singleProcessSource } from './cluster-metrics.js';
import type { ClusterView } from '../cluster/index.js';
import { DashboardFeed } from './dashboard-feed.js';
import { streamDashboard } from './dashboard-route.js';
import { singleProcessView } from './single-process-view.js';
import { defaultWebRoot, isWebPath, sendWebFile } from './web-files.js';
import { Metrics } from './metrics.js';
import { RequestTrace } from './request-trace.js';
import { sendJson, type RouteHandler } from './route-context.js';
import { Scheduler, type SchedulerOptions } from './scheduler.js';
import type { ServedModel } from './served-model.js';
import type { ExpertLoad } from '../engine/index.js';

export interface ApiServerOptions {
  host: string;
  /** 0 picks a free port (`url` says which). */
  port: number;
  /** When set, every route but /health needs `Authorization: Bearer KEY` or `X-Api-Key: KEY`. */
  apiKey?: string;
  /** Request bodies longer than this are refused with 413. */
  maxBodyBytes: number;
  slots: number;
  maxQueue: number;
  /** Prompt tokens prefilled per step beside running streams (SchedulerOptions.mixedChunk; default: the model's). */
  prefillChunk?: number;
  /** Loads the model, called once the port is bound: /health answers 503 until it resolves. */
  load: () => Promise<ServedModel>;
  /** Called with the bound URL before the model starts loading. */
  onBound?: (url: string) => void;
  /** Tests only: see SchedulerOptions.stepHook. */
  stepHook?: SchedulerOptions['stepHook'];
  /** Where each request's line goes (RequestTrace.logFields); default: nowhere. */
  logger?: Logger;
  /** The built dashboard served at / (default: the package's build/web). */
  webRoot?: string;
  /**
   * Web pages of these origins (`scheme://host[:port]`, or `*` for any) may call the API from
   * a browser: their requests' answers carry Access-Control-Allow-Origin and their preflight
   * requests are answered. Default none: only the dashboard's own origin.
   */
  corsOrigins?: readonly string[];
}

/**
 * Request headers a preflight allows when it asks for none; the headers it asks for are
 * allowed as asked (clients' SDKs add headers of their own), the key still checked after it.
 */
const CORS_HEADERS = 'authorization, content-type, x-api-key';
/** How long a browser may keep a preflight's answer (seconds). */
const CORS_MAX_AGE_S = 600;

/** Routes that run on the model, by method and path. */
const modelRoutes: Record<string, RouteHandler> = {
  'POST /v1/chat/completions': chatCompletions,
  'POST /v1/completions': completions,
  'POST /tokenize': tokenize,
  'POST /detokenize': detokenize,
};
const infoRoutes = new Set([
  'GET /health',
  'GET /v1/models',
  'GET /metrics',
  'GET /v1/cluster',
  'GET /v1/dashboard/events',
]);

type State =
  | { kind: 'loading' }
  | { kind: 'ready'; served: ServedModel; scheduler: Scheduler }
  | { kind: 'failed'; error: unknown }
  | { kind: 'closing' };

const LOADING_RETRY_S = 2;

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

/**
 * The HTTP server: routing, the body limit, authentication, and the server's life (loading,
 * ready, closing). It listens before the model is loaded so that /health can say it is loading.
 */
export class ApiServer {
  readonly metrics: Metrics;
  /** The snapshots GET /v1/dashboard/events streams. */
  readonly dashboard: DashboardFeed;
  private readonly logger: Logger;
  private state: State = { kind: 'loading' };
  private readonly keyDigest: Buffer | undefined;
  private loading: Promise<ServedModel> | undefined;
  private loaded: Promise<void> | undefined;
  private loadedAtMs = 0;

  private constructor(
    private readonly server: Server,
    private readonly options: ApiServerOptions,
  ) {
    this.keyDigest = options.apiKey !== undefined ? digest(options.apiKey) : undefined;
    this.metrics = new Metrics(options.slots);
    this.logger = options.logger ?? silentLogger();
    this.dashboard = new DashboardFeed({
      metrics: this.metrics,
      slots: options.slots,
      status: () =>
        this.state.kind === 'ready' && this.state.served.problem?.() ? 'failed' : this.state.kind,
      model: () => (this.state.kind === 'ready' ? this.state.served.name : null),
      cluster: () => (this.state.kind === 'ready' ? this.clusterView(this.state.served) : null),
    });
  }

  /** Binds host:port, starts answering (503 on the model's routes) and starts loading the model. */
  static async start(options: ApiServerOptions): Promise<ApiServer> {
    const server = createServer();
    const api = new ApiServer(server, options);
    server.on('request', (req: IncomingMessage, res: ServerResponse) => void api.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port, options.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    options.onBound?.(api.url);
    api.startLoading();
    return api;
  }

  /** Resolves once the model is loaded and the routes answer; rejects if loading failed. */
  get ready(): Promise<void> {
    return this.loaded as Promise<void>;
  }

  private startLoading(): void {
    this.loading = this.options.load();
    this.loaded = this.loading.then(
      (served) => {
        if (this.state.kind === 'closing') return;
        const scheduler = new Scheduler(served.model, {
          slots: this.options.slots,
          maxQueue: this.options.maxQueue,
          contextLength: served.contextLength,
          ...(this.options.prefillChunk !== undefined ? { mixedChunk: this.options.prefillChunk } : {}),
          metrics: this.metrics,
          ...(this.options.stepHook ? { stepHook: this.options.stepHook } : {}),
        });
        this.state = { kind: 'ready', served, scheduler };
        this.loadedAtMs = Date.now();
        this.metrics.readScheduler(() => scheduler);
        this.metrics.experts.setLoad((served.model as { expertLoad?: ExpertLoad }).expertLoad);
        if (served.cluster) this.metrics.setClusterSource(clusterViewSource(served.cluster));
        else if (!this.metrics.cluster.hasSource) this.metrics.setClusterSource(singleProcessSource());
      },
      (error: unknown) => {
        this.state = { kind: 'failed', error };
        throw error;
      },
    );
    // the caller awaits `ready`; this keeps a failed load from being an unhandled rejection meanwhile
    this.loaded.catch(() => {});
  }

  get url(): string {
    const { address, port } = this.server.address() as AddressInfo;
    return `http://${address.includes(':') ? `[${address}]` : address}:${port}`;
  }

  /**
   * Stops accepting, lets running requests finish for up to `graceMs`, cancels the rest
   * (streams get an error event), then closes every connection and releases the model.
   */
  async close(graceMs = 5000): Promise<void> {
    const before = this.state;
    this.state = { kind: 'closing' };
    this.metrics.energy.stop();
    this.dashboard.close();
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeIdleConnections();
    if (before.kind === 'ready') await before.scheduler.close(graceMs);
    this.server.closeAllConnections();
    await closed;
    if (before.kind === 'ready') await before.served.close();
    else if (before.kind === 'loading')
      await this.loading?.then(
        (m) => m.close(),
        () => {},
      );
  }

  /**
   * The Access-Control-Allow-Origin a request's Origin gets, or undefined when its page may
   * not read the answer (no --cors, an origin not listed, or no Origin: not a browser's call
   * across origins).
   */
  private allowedOrigin(req: IncomingMessage): string | undefined {
    const origin = req.headers.origin;
    const list = this.options.corsOrigins;
    if (origin === undefined || list === undefined) return undefined;
    if (list.includes('*')) return '*';
    return list.includes(origin) ? origin : undefined;
  }

  /** A browser's preflight (OPTIONS): 204 with what the page may send, or 403 naming the origin. */
  private preflight(req: IncomingMessage, res: ServerResponse, allowed: string | undefined): void {
    if (allowed === undefined)
      throw new TandemError(
        'API_CORS',
        `origin ${req.headers.origin ?? '(none)'} may not call this server from a browser`,
        {
          hint:
            this.options.corsOrigins === undefined
              ? 'start tandem serve with --cors ORIGIN (or --cors "*") to let web pages of that origin call it'
              : `the allowed origins are ${this.options.corsOrigins.join(', ')}`,
        },
      );
    res.writeHead(204, {
      vary: 'Origin, Access-Control-Request-Headers',
      'access-control-allow-methods': 'GET, POST, OPTIONS',
      'access-control-allow-headers': req.headers['access-control-request-headers'] ?? CORS_HEADERS,
      'access-control-max-age': String(CORS_MAX_AGE_S),
    });
    res.end();
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0] as string;
    const route = `${req.method ?? 'GET'} ${path}`;
    const web = req.method === 'GET' && isWebPath(path);
    const preflight = req.method === 'OPTIONS';
    const known = route in modelRoutes || infoRoutes.has(route) || web;
    // the dashboard's files count as one route: asset names would make a label per build
    const label = web ? 'web' : preflight ? 'preflight' : known ? path : 'unknown';
    const allowed = this.allowedOrigin(req);
    if (allowed !== undefined) {
      res.setHeader('access-control-allow-origin', allowed);
      res.setHeader('access-control-expose-headers', 'x-request-id, retry-after');
    }
    // an answer that depends on the Origin says so, granted or not, so no cache hands it to another
    if (this.options.corsOrigins !== undefined && !this.options.corsOrigins.includes('*'))
      res.setHeader('vary', 'Origin');
    res.once('close', () => this.metrics.countRequest(label, res.statusCode));
    const trace = new RequestTrace(known ? route : `${req.method ?? 'GET'} unknown`);
    res.setHeader('x-request-id', trace.id);
    const controller = new AbortController();
    res.once('close', () => {
      if (!res.writableFinished) controller.abort();
    });
    try {
      // a browser's preflight carries no key: it asks whether the real request may be sent
      if (preflight) return this.preflight(req, res, allowed);
      if (route === 'GET /health') return this.health(res);
      // the page holds no data and asks for the key itself; what it shows comes from the API
      if (web) return await sendWebFile(res, this.options.webRoot ?? defaultWebRoot, path);
      this.authenticate(req);
      if (!known)
        throw new TandemError('API_NOT_FOUND', `no route ${req.method} ${path}`, {
          hint: 'see docs/serve.md for the routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, ...',
        });
      if (route === 'GET /v1/models')
        return sendJson(res, 200, modelList(this.state.kind === 'ready' ? this.state : undefined));
      if (route === 'GET /metrics') return await this.sendMetrics(res);
      if (route === 'GET /v1/cluster') return this.sendCluster(res);
      if (route === 'GET /v1/dashboard/events')
        return await streamDashboard(res, this.dashboard, controller.signal);
      const body = await this.readBody(req);
      const state = this.requireReady();
      await (modelRoutes[route] as RouteHandler)({
        req,
        res,
        body,
        served: state.served,
        scheduler: state.scheduler,
        metrics: this.metrics,
        trace,
        signal: controller.signal,
      });
    } catch (error) {
      trace.fail(error);
      const e = toHttpError(error);
      sendJson(res, e.status, e.body, e.headers);
    } finally {
      this.requestEnded(trace, res);
    }
  }

  /** A request's metrics and its log line; scrapes and health checks that succeed log at debug only. */
  private requestEnded(trace: RequestTrace, res: ServerResponse): void {
    const outcome = trace.end();
    this.metrics.requestEnded(trace, outcome);
    const line = trace.logFields(outcome, res.headersSent ? res.statusCode : null);
    const routine = outcome === 'ok' && (trace.route === 'GET /metrics' || trace.route === 'GET /health');
    if (routine) this.logger.debug(line, 'request');
    else this.logger.info(line, 'request');
  }

  private health(res: ServerResponse): void {
    const problem = this.state.kind === 'ready' ? this.state.served.problem?.() : undefined;
    if (this.state.kind === 'ready' && !problem) return sendJson(res, 200, { status: 'ok' });
    const e = toHttpError(problem ?? this.notReady());
    sendJson(res, e.status, e.body, e.headers);
  }

  private notReady(): TandemError {
    switch (this.state.kind) {
      case 'failed':
        return new TandemError('API_LOADING', 'the model failed to load', {
          hint: "see the server's log",
          details: { retryAfterS: LOADING_RETRY_S },
        });
      case 'closing':
        return retryLater(
          'API_SHUTTING_DOWN',
          'the server is shutting down',
          1,
          'send the request after the restart',
        );
      default:
        return retryLater(
          'API_LOADING',
          'the model is loading',
          LOADING_RETRY_S,
          'retry after the Retry-After seconds; GET /health answers 200 once it is loaded',
        );
    }
  }

  private requireReady(): Extract<State, { kind: 'ready' }> {
    if (this.state.kind !== 'ready') throw this.notReady();
    const problem = this.state.served.problem?.();
    if (problem) throw problem;
    return this.state;
  }

  /**
   * GET /v1/cluster: members, placement and re-placements of a model served over nodes; a
   * model served in this process is a cluster of one member.
   */
  private sendCluster(res: ServerResponse): void {
    sendJson(res, 200, this.clusterView(this.requireReady().served));
  }

  private clusterView(served: ServedModel): ClusterView {
    const { address, port } = this.server.address() as AddressInfo;
    return served.cluster
      ? served.cluster()
      : singleProcessView(served, `${address}:${port}`, this.loadedAtMs);
  }

  private async sendMetrics(res: ServerResponse): Promise<void> {
    const text = await this.metrics.render();
    res.writeHead(200, { 'content-type': this.metrics.contentType });
    res.end(text);
  }

  private authenticate(req: IncomingMessage): void {
    if (!this.keyDigest) return;
    const bearer = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '')?.[1];
    const given =
      bearer ?? (typeof req.headers['x-api-key'] === 'string' ? req.headers['x-api-key'] : undefined);
    if (given === undefined || !timingSafeEqual(digest(given.trim()), this.keyDigest)) {
      throw new TandemError(
        'API_AUTH',
        given === undefined ? 'no API key given' : 'the API key is not valid',
        {
          hint: "send the server's key as `Authorization: Bearer KEY` or `X-Api-Key: KEY`",
        },
      );
    }
  }

  /**
   * The JSON body, refused with 413 past --max-body: before reading it when Content-Length
   * says so, else once the bytes read pass the limit. The rest is read and dropped (not the
   * connection cut), so that the client gets the answer.
   */
  private async readBody(req: IncomingMessage): Promise<unknown> {
    const limit = this.options.maxBodyBytes;
    const tooLarge = new TandemError(
      'API_BODY_TOO_LARGE',
      `the request body is longer than the limit of ${limit} bytes`,
      {
        hint: 'send a shorter request, or start the server with a larger --max-body',
        details: { limit },
      },
    );
    if (Number(req.headers['content-length'] ?? 0) > limit) {
      req.resume();
      throw tooLarge;
    }
    const bytes = await new Promise<Buffer>((resolve, reject) => {
      const chunks: Buffer[] = [];
      let length = 0;
      req.on('data', (chunk: Buffer) => {
        length += chunk.length;
        if (length > limit) reject(tooLarge);
        else chunks.push(chunk);
      });
      req.on('end', () => resolve(Buffer.concat(chunks)));
      req.on('error', reject);
    });
    try {
      return JSON.parse(bytes.toString('utf8')) as unknown;
    } catch (error) {
      throw badRequest(
        null,
        `the request body is not JSON: ${(error as Error).message}`,
        'send a JSON object with content-type application/json',
      );
    }
  }
}
