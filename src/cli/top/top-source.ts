import { TandemError } from '../../errors/index.js';
import type { DashboardSnapshot } from '../../api/dashboard-snapshot.js';
import { sseData } from '../../api/sse-reader.js';

/** How long one read of the server may take (connecting, the first snapshot). */
const READ_TIMEOUT_MS = 10_000;

/** The server's base address (no trailing `/`); CLI_USAGE unless an http(s) URL. */
export function topBaseUrl(text: string): string {
  let url: URL | undefined;
  try {
    url = new URL(text);
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.host === '')
    throw new TandemError('CLI_USAGE', `top: --url '${text}' is not an http(s) URL`, {
      hint: 'give the address `tandem serve` prints, e.g. --url http://127.0.0.1:8080',
      details: { url: text },
    });
  return url.href.replace(/\/+$/, '').replace(/\/v1$/, '');
}

/**
 * One snapshot of a running `tandem serve`: the first event of GET /v1/dashboard/events (the
 * server sends one at once: members, links, placement, events, tokens/s, queue depth), read
 * and the stream closed, within READ_TIMEOUT_MS. An unreachable server is CLI_TOP_UNREACHABLE,
 * a refused key CLI_TOP_AUTH; both say what to do.
 */
export async function readSnapshot(base: string, apiKey: string | undefined): Promise<DashboardSnapshot> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), READ_TIMEOUT_MS);
  const url = `${base}/v1/dashboard/events`;
  try {
    let res: Response;
    try {
      res = await fetch(url, {
        headers: apiKey !== undefined ? { authorization: `Bearer ${apiKey}` } : {},
        signal: controller.signal,
      });
    } catch (error) {
      const cause = (error as { cause?: { code?: string; message?: string } }).cause;
      const why = controller.signal.aborted
        ? `no answer within ${READ_TIMEOUT_MS} ms`
        : (cause?.code ?? cause?.message ?? (error as Error).message);
      throw unreachable(base, why, error);
    }
    if (res.status === 401 || res.status === 403) {
      await res.body?.cancel();
      throw new TandemError('CLI_TOP_AUTH', `top: the server at ${base} refused the key (${res.status})`, {
        hint:
          apiKey === undefined
            ? 'the server needs its API key: pass --api-key KEY, --api-key-file FILE or set TANDEM_API_KEY'
            : "the key given is not the server's: check --api-key, --api-key-file or TANDEM_API_KEY",
        details: { url: base, status: res.status },
      });
    }
    if (!res.ok || !res.body || !(res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
      await res.body?.cancel();
      throw unreachable(base, `GET /v1/dashboard/events answered ${res.status}, not an event stream`);
    }
    try {
      for await (const data of sseData(res.body)) return JSON.parse(data) as DashboardSnapshot;
    } catch (error) {
      if (error instanceof SyntaxError) throw unreachable(base, 'its events are not JSON', error);
      throw unreachable(
        base,
        controller.signal.aborted ? `no snapshot within ${READ_TIMEOUT_MS} ms` : String(error),
        error,
      );
    }
    throw unreachable(base, 'the event stream ended before its first snapshot');
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
}

function unreachable(base: string, why: string, cause?: unknown): TandemError {
  return new TandemError('CLI_TOP_UNREACHABLE', `top: cannot read the cluster from ${base} (${why})`, {
    hint: 'start `tandem serve` (it prints the address it listens on) or fix --url; top needs a tandem server, which serves /v1/dashboard/events',
    details: { url: base, reason: why },
    ...(cause !== undefined ? { cause } : {}),
  });
}
