import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { isTandemError } from '../errors/index.js';
import { toHttpError } from './errors.js';

/** How a request ended, as the log line and the metrics name it. */
export type RequestOutcome = 'stop' | 'length' | 'abort' | 'rejected' | 'error' | 'ok';

/** Codes of the refusals a client should retry (queue full, loading, shutting down): `rejected`. */
const REFUSALS = new Set(['API_QUEUE_FULL', 'API_LOADING', 'API_SHUTTING_DOWN']);

/**
 * One HTTP request's life, in ms on the performance clock (`performance.now()`): when it
 * arrived, was queued for a slot, took one, produced each token, and how it ended. The server
 * makes one per request; the generation fills in the parts it reaches.
 */
export class RequestTrace {
  /** `req-` and 24 hex digits: the log line's id and the `x-request-id` response header. */
  readonly id = `req-${randomUUID().replaceAll('-', '').slice(0, 24)}`;
  readonly startMs = performance.now();
  queuedMs: number | undefined;
  admittedMs: number | undefined;
  firstTokenMs: number | undefined;
  lastTokenMs: number | undefined;
  endMs: number | undefined;
  /** Seconds between consecutive generated tokens (one fewer than the tokens). */
  readonly gapsS: number[] = [];
  promptTokens = 0;
  generatedTokens = 0;
  finishReason: 'stop' | 'length' | undefined;
  /** What the request failed with, if it did (also a failure after its stream began). */
  error: unknown;

  constructor(readonly route: string) {}

  /** Submitted to the scheduler with this prompt. */
  queued(promptTokens: number): void {
    this.queuedMs = performance.now();
    this.promptTokens = promptTokens;
  }

  /** Took a slot. */
  admitted(): void {
    this.admittedMs = performance.now();
  }

  /** A token was generated (every one, the end-of-generation token included). */
  token(): void {
    const now = performance.now();
    if (this.lastTokenMs === undefined) this.firstTokenMs = now;
    else this.gapsS.push((now - this.lastTokenMs) / 1000);
    this.lastTokenMs = now;
    this.generatedTokens++;
  }

  finished(reason: 'stop' | 'length'): void {
    this.finishReason = reason;
  }

  fail(error: unknown): void {
    this.error ??= error;
  }

  /** Marks the end (once) and says how the request ended. */
  end(): RequestOutcome {
    this.endMs ??= performance.now();
    if (this.finishReason) return this.finishReason;
    if (this.error === undefined) return 'ok';
    const code = isTandemError(this.error) ? this.error.code : undefined;
    if (code === 'API_CANCELLED') return 'abort';
    return code !== undefined && REFUSALS.has(code) ? 'rejected' : 'error';
  }

  /** The OpenAI error type and code of the failure, when there was one. */
  errorKind(): { type: string; code: string } | undefined {
    if (this.error === undefined) return undefined;
    const { type, code } = toHttpError(this.error).body.error;
    return { type, code: code ?? 'unknown' };
  }

  /** Seconds from arrival to the first token, queued to admitted, and arrival to the end. */
  timings(): { queueS?: number; ttftS?: number; totalS?: number } {
    const s = (from: number | undefined, to: number | undefined): number | undefined =>
      from !== undefined && to !== undefined ? (to - from) / 1000 : undefined;
    const out: { queueS?: number; ttftS?: number; totalS?: number } = {};
    const queueS = s(this.queuedMs, this.admittedMs);
    const ttftS = s(this.startMs, this.firstTokenMs);
    const totalS = s(this.startMs, this.endMs);
    if (queueS !== undefined) out.queueS = queueS;
    if (ttftS !== undefined) out.ttftS = ttftS;
    if (totalS !== undefined) out.totalS = totalS;
    return out;
  }

  /**
   * The request's log line: id, route, status (null when none was sent), outcome, the timings
   * in ms it reached, its tokens (completions), the error's code. Absent parts are left out.
   */
  logFields(outcome: RequestOutcome, status: number | null): Record<string, unknown> {
    const { queueS, ttftS, totalS } = this.timings();
    const ms = (s: number | undefined): number | undefined =>
      s === undefined ? undefined : Math.round(s * 1e4) / 10;
    const completion = this.queuedMs !== undefined;
    return {
      id: this.id,
      route: this.route,
      status,
      outcome,
      queue_ms: ms(queueS),
      ttft_ms: ms(ttftS),
      total_ms: ms(totalS),
      prompt_tokens: completion ? this.promptTokens : undefined,
      completion_tokens: completion ? this.generatedTokens : undefined,
      error: this.errorKind()?.code,
    };
  }
}
