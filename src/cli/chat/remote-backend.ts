import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { TandemError } from '../../errors/index.js';
import type { ChatMessage } from '../../engine/index.js';
import { contextOverflow, type AnswerStats, type ChatBackend } from './backend.js';
import { sseData } from '../../api/sse-reader.js';

export interface RemoteBackendOptions {
  /** The server's address: `http://host:port`, with or without a trailing `/v1`. */
  url: string;
  apiKey?: string;
  /** The model id to ask for; default the first the server lists. */
  model?: string;
  /** OpenAI's sampling parameters (the server's own sampler takes no others). */
  temperature: number;
  topP: number;
  seed?: number;
  /** How long to wait for a server that is still loading its model. */
  loadWaitMs?: number;
}

/** The error body OpenAI-compatible servers send. */
interface ErrorBody {
  error?: { message?: string; param?: string | null; code?: string | null };
}

/** One streamed `chat.completion.chunk` (the fields read here). */
interface Chunk extends ErrorBody {
  choices?: { delta?: { content?: string | null }; finish_reason?: string | null }[];
  usage?: { completion_tokens?: number } | null;
}

/** The server's base address (no trailing `/` or `/v1`); CLI_CHAT_BAD_URL unless http(s). */
export function baseUrl(text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    url = new URL('invalid:');
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.host === '')
    throw new TandemError('CLI_CHAT_BAD_URL', `chat: --url '${text}' is not an http(s) URL`, {
      hint: 'give the address `tandem serve` prints, e.g. --url http://127.0.0.1:8080',
      details: { url: text },
    });
  return url.href.replace(/\/+$/, '').replace(/\/v1$/, '');
}

/**
 * A running OpenAI-compatible server (`tandem serve`, llama-server, vLLM...) answering over
 * POST /v1/chat/completions with `stream: true`: the server renders the messages in its chat
 * template and prefills the whole conversation on each turn.
 */
export class RemoteBackend implements ChatBackend {
  readonly description: string;

  private constructor(
    private readonly base: string,
    private readonly model: string,
    private readonly o: RemoteBackendOptions,
  ) {
    this.description = `${model} at ${base}`;
  }

  /** Checks the address, the key and the model (GET /v1/models) before the first message. */
  static async connect(o: RemoteBackendOptions, log: (line: string) => void): Promise<RemoteBackend> {
    const base = baseUrl(o.url);
    const deadline = Date.now() + (o.loadWaitMs ?? 120_000);
    for (let said = false; ; said = true) {
      const res = await request(base, '/v1/models', { headers: headers(o.apiKey) }, 10_000);
      const loading = res.status === 503;
      if (loading) await res.body?.cancel();
      const ids = loading ? [] : await modelIds(await checkStatus(res, base, o.apiKey, '/v1/models'));
      if (ids.length > 0) {
        if (o.model === undefined) return new RemoteBackend(base, ids[0] as string, o);
        if (ids.includes(o.model)) return new RemoteBackend(base, o.model, o);
        throw unknownModel(o.model, base, ids);
      }
      if (Date.now() > deadline)
        throw new TandemError('CLI_CHAT_SERVER', `chat: the server at ${base} lists no model`, {
          hint: 'wait until `tandem serve` prints `listening on`, then start the chat again',
          details: { url: base },
        });
      if (!said) log(`waiting for the server at ${base} to load its model`);
      await sleep(500);
    }
  }

  async answer(
    messages: readonly ChatMessage[],
    maxTokens: number | undefined,
    onText: (text: string) => void,
    signal: AbortSignal,
  ): Promise<AnswerStats> {
    const body = {
      model: this.model,
      messages,
      stream: true,
      stream_options: { include_usage: true },
      temperature: this.o.temperature,
      top_p: this.o.topP,
      ...(this.o.seed !== undefined ? { seed: this.o.seed } : {}),
      ...(maxTokens !== undefined ? { max_tokens: maxTokens } : {}),
    };
    const start = performance.now();
    const stats: AnswerStats = { tokens: 0, ttftMs: 0, tokS: 0, finishReason: 'stop' };
    let first = 0;
    let last = 0;
    let pieces = 0;
    try {
      const res = await request(this.base, '/v1/chat/completions', {
        method: 'POST',
        headers: { ...headers(this.o.apiKey), 'content-type': 'application/json' },
        body: JSON.stringify(body),
        signal,
      });
      if (res.status === 400) await throwOverflow(res, this.base);
      await checkStatus(res, this.base, this.o.apiKey, '/v1/chat/completions', this.model);
      for await (const data of sseData(res.body ?? emptyBody())) {
        if (data === '[DONE]') break;
        const chunk = parseChunk(this.base, data);
        if (chunk.error) throw serverError(this.base, 200, chunk.error.message ?? data);
        const choice = chunk.choices?.[0];
        const text = choice?.delta?.content ?? '';
        if (text !== '') {
          last = performance.now();
          if (pieces++ === 0) first = last;
          onText(text);
        }
        if (choice?.finish_reason) stats.finishReason = choice.finish_reason === 'length' ? 'length' : 'stop';
        if (typeof chunk.usage?.completion_tokens === 'number') stats.tokens = chunk.usage.completion_tokens;
      }
    } catch (error) {
      if (!signal.aborted) throw error;
      stats.finishReason = 'aborted';
    }
    // without usage (another server, or a stream cut short) each content chunk counts as a token
    if (stats.tokens === 0) stats.tokens = pieces;
    stats.ttftMs = pieces > 0 ? first - start : 0;
    stats.tokS = stats.tokens > 1 && last > first ? (stats.tokens - 1) / ((last - first) / 1000) : 0;
    return stats;
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

function headers(apiKey: string | undefined): Record<string, string> {
  return apiKey !== undefined ? { authorization: `Bearer ${apiKey}` } : {};
}

function emptyBody(): AsyncIterable<Uint8Array> {
  return (async function* () {})();
}

/** fetch, with a network failure (refused, unknown host, timeout) as CLI_CHAT_UNREACHABLE. */
async function request(base: string, path: string, init: RequestInit, timeoutMs?: number): Promise<Response> {
  const signal =
    timeoutMs === undefined
      ? init.signal
      : init.signal
        ? AbortSignal.any([init.signal, AbortSignal.timeout(timeoutMs)])
        : AbortSignal.timeout(timeoutMs);
  try {
    return await fetch(`${base}${path}`, { ...init, ...(signal ? { signal } : {}) });
  } catch (error) {
    if (init.signal?.aborted) throw error;
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    const why = cause?.code ?? cause?.message ?? (error as Error).message;
    throw new TandemError('CLI_CHAT_UNREACHABLE', `chat: cannot reach ${base}${path} (${why})`, {
      hint: 'start the server (`tandem serve MODEL` prints the address it listens on) or fix --url',
      details: { url: base, reason: why },
      cause: error,
    });
  }
}

async function errorMessage(res: Response): Promise<{ message: string; param: string | null }> {
  const text = await res.text();
  try {
    const e = (JSON.parse(text) as ErrorBody).error;
    return { message: e?.message ?? text, param: e?.param ?? null };
  } catch {
    return { message: text.slice(0, 200), param: null };
  }
}

/** A 400 for the prompt or max_tokens (tandem serve's `param`) is a context overflow. */
async function throwOverflow(res: Response, base: string): Promise<never> {
  const { message, param } = await errorMessage(res);
  if (param === 'messages') throw contextOverflow(`chat: ${message}`, { kind: 'prompt' });
  if (param === 'max_tokens') throw contextOverflow(`chat: ${message}`, { kind: 'answer' });
  throw serverError(base, 400, message);
}

/** The body of a 2xx answer; a typed error for 401/403, an unknown model, or any other failure. */
async function checkStatus(
  res: Response,
  base: string,
  apiKey: string | undefined,
  path: string,
  model?: string,
): Promise<Response> {
  if (res.ok) return res;
  const { message, param } = await errorMessage(res);
  if (res.status === 401 || res.status === 403)
    throw new TandemError(
      'CLI_CHAT_AUTH',
      `chat: the server at ${base} refused the request (${res.status}): ${message}`,
      {
        hint:
          apiKey === undefined
            ? "the server needs an API key: pass --api-key KEY or set TANDEM_API_KEY to the server's key"
            : "the key given is not the server's: check --api-key or TANDEM_API_KEY",
        details: { url: base, status: res.status },
      },
    );
  if (res.status === 404 && model !== undefined && param === 'model') throw unknownModel(model, base, []);
  if (res.status === 404)
    throw new TandemError('CLI_CHAT_UNREACHABLE', `chat: ${base}${path} answered 404: ${message}`, {
      hint: 'point --url at an OpenAI-compatible server, such as `tandem serve`',
      details: { url: base, status: 404 },
    });
  throw serverError(base, res.status, message);
}

/** The ids GET /v1/models lists (none when the body is not such a list). */
async function modelIds(res: Response): Promise<string[]> {
  const body = (await res.json().catch(() => ({}))) as { data?: { id?: unknown }[] };
  const data = Array.isArray(body.data) ? body.data : [];
  return data.map((m) => m?.id).filter((id): id is string => typeof id === 'string');
}

function unknownModel(model: string, base: string, ids: readonly string[]): TandemError {
  const served = ids.length > 0 ? `; it serves ${ids.map((id) => `'${id}'`).join(', ')}` : '';
  return new TandemError('CLI_CHAT_MODEL', `chat: the server at ${base} has no model '${model}'${served}`, {
    hint: 'name a model the server lists (GET /v1/models), or give none to use its first',
    details: { url: base, model, served: [...ids] },
  });
}

/** One event's JSON; anything else is the server's fault, said as such. */
function parseChunk(base: string, data: string): Chunk {
  try {
    return JSON.parse(data) as Chunk;
  } catch {
    throw serverError(base, 200, `a streamed event is not JSON: ${data.slice(0, 200)}`);
  }
}

function serverError(base: string, status: number, message: string): TandemError {
  return new TandemError(
    'CLI_CHAT_SERVER',
    `chat: the server at ${base} failed the request (${status}): ${message}`,
    {
      hint: "see the server's log; send the message again",
      details: { url: base, status },
    },
  );
}
