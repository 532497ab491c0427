import type { ServerResponse } from 'node:http';
import type { OpenAiErrorBody } from './errors.js';

/**
 * A server-sent events response as OpenAI streams: `data: <json>` events, then `data: [DONE]`;
 * a failure after the stream began is one `data: {"error":{...}}` event before it closes.
 */
export class EventStream {
  private ended = false;

  constructor(private readonly res: ServerResponse) {
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    res.flushHeaders();
  }

  /** Whether the stream was ended by us or cut by the client. */
  get closed(): boolean {
    return this.ended || this.res.destroyed || this.res.writableEnded;
  }

  send(event: object): void {
    if (!this.closed) this.res.write(`data: ${JSON.stringify(event)}\n\n`);
  }

  /** The normal end: `data: [DONE]`. */
  done(): void {
    if (this.closed) return;
    this.res.write('data: [DONE]\n\n');
    this.end();
  }

  /** The end after a failure: the error event, no [DONE]. */
  fail(error: OpenAiErrorBody): void {
    this.send(error);
    this.end();
  }

  private end(): void {
    this.ended = true;
    this.res.end();
  }
}
