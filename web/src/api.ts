import type { Snapshot } from './types.js';

// The key lives in sessionStorage: it survives a reload, not the tab.
const KEY_ITEM = 'tandem.apiKey';

export function storedKey(): string | null {
  return sessionStorage.getItem(KEY_ITEM);
}

export function storeKey(key: string | null): void {
  if (key === null) sessionStorage.removeItem(KEY_ITEM);
  else sessionStorage.setItem(KEY_ITEM, key);
}

function headers(key: string | null): Record<string, string> {
  return key ? { authorization: `Bearer ${key}` } : {};
}

/** The server asked for a key (401): the page shows the login form. */
export class Unauthorized extends Error {}

/**
 * Calls `onData` with the data of each server-sent event in `body` until it ends. Read through
 * fetch rather than EventSource, which cannot send the Authorization header: the key then
 * never goes into a URL (server logs, history).
 */
async function readEvents(body: ReadableStream<Uint8Array>, onData: (data: string) => void): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    text += decoder.decode(value, { stream: true });
    let end: number;
    while ((end = text.indexOf('\n\n')) >= 0) {
      const event = text.slice(0, end);
      text = text.slice(end + 2);
      const data = event
        .split('\n')
        .filter((l) => l.startsWith('data: '))
        .map((l) => l.slice(6))
        .join('\n');
      if (data) onData(data);
    }
  }
}

async function check(res: Response): Promise<ReadableStream<Uint8Array>> {
  if (res.status === 401) throw new Unauthorized('the server needs an API key');
  if (!res.ok || !res.body) {
    const text = await res.text();
    let message = text;
    try {
      message = (JSON.parse(text) as { error: { message: string } }).error.message;
    } catch {
      // not an OpenAI error body: show the text as it is
    }
    throw new Error(`${res.status}: ${message}`);
  }
  return res.body;
}

/** Follows GET /v1/dashboard/events until `signal` aborts or the server ends it. */
export async function followDashboard(
  key: string | null,
  onSnapshot: (s: Snapshot) => void,
  signal: AbortSignal,
): Promise<void> {
  const res = await fetch('/v1/dashboard/events', { headers: headers(key), signal });
  await readEvents(await check(res), (data) => onSnapshot(JSON.parse(data) as Snapshot));
}

export interface ChatMessage {
  role: 'user' | 'assistant';
  content: string;
}

/** What a streamed answer reports as it goes: its text so far and, at the end, its token count. */
export interface ChatProgress {
  text: string;
  completionTokens: number | null;
}

/** Streams an answer from POST /v1/chat/completions, calling `onProgress` on each piece. */
export async function streamChat(
  key: string | null,
  messages: ChatMessage[],
  onProgress: (p: ChatProgress) => void,
  signal: AbortSignal,
): Promise<void> {
  const res = await fetch('/v1/chat/completions', {
    method: 'POST',
    headers: { ...headers(key), 'content-type': 'application/json' },
    // no max_tokens: the answer may use the context left (a history that outgrows it gets the server's 400)
    body: JSON.stringify({ messages, stream: true, stream_options: { include_usage: true } }),
    signal,
  });
  const progress: ChatProgress = { text: '', completionTokens: null };
  await readEvents(await check(res), (data) => {
    if (data === '[DONE]') return;
    const chunk = JSON.parse(data) as {
      error?: { message: string };
      choices?: { delta?: { content?: string } }[];
      usage?: { completion_tokens: number } | null;
    };
    if (chunk.error) throw new Error(chunk.error.message);
    const piece = chunk.choices?.[0]?.delta?.content;
    if (piece) progress.text += piece;
    if (chunk.usage) progress.completionTokens = chunk.usage.completion_tokens;
    onProgress({ ...progress });
  });
}
