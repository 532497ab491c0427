/**
 * Server-sent events as OpenAI-compatible servers stream them, read from a fetch body: yields
 * each event's data (its `data:` lines joined by newlines). Events end at a blank line; CR LF
 * and LF line ends are both taken; comments (`:`) and other fields (`event:`, `id:`) are
 * skipped. A last event without its blank line still counts.
 */
export async function* sseData(body: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buffer = '';
  let data: string[] = [];
  for await (const chunk of body) {
    buffer += decoder.decode(chunk, { stream: true });
    const lines = buffer.split(/\r?\n/);
    buffer = lines.pop() as string;
    for (const line of lines) {
      if (line === '') {
        if (data.length > 0) yield data.join('\n');
        data = [];
      } else if (line.startsWith('data:')) {
        data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
      }
    }
  }
  buffer += decoder.decode();
  if (buffer.startsWith('data:')) data.push(buffer.slice(buffer.startsWith('data: ') ? 6 : 5));
  if (data.length > 0) yield data.join('\n');
}

/** What a client read from one streamed `/v1/completions` request. */
export interface StreamedCompletion {
  status: number;
  text: string;
  /** When each chunk with text arrived, by the given clock. */
  chunkTimes: number[];
  finishReason: string | undefined;
  /** The usage chunk's count (with `stream_options.include_usage`). */
  completionTokens: number | undefined;
  /** The stream ended with `data: [DONE]`. */
  done: boolean;
  /** The error event's message, or the body of a refused request. */
  error: string | undefined;
}

/**
 * Streams one legacy completion (`body` as the route takes it; `stream: true` is added) and
 * reads it to the end: the client side that tests and benchmarks share.
 */
export async function streamCompletion(
  url: string,
  body: Record<string, unknown>,
  o: { signal?: AbortSignal; clock?: () => number; onText?: (text: string) => void } = {},
): Promise<StreamedCompletion> {
  const clock = o.clock ?? (() => performance.now());
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
    ...(o.signal ? { signal: o.signal } : {}),
  });
  const out: StreamedCompletion = {
    status: res.status,
    text: '',
    chunkTimes: [],
    finishReason: undefined,
    completionTokens: undefined,
    done: false,
    error: undefined,
  };
  if (res.status !== 200 || !res.body) {
    out.error = await res.text();
    return out;
  }
  for await (const data of sseData(res.body)) {
    if (data === '[DONE]') {
      out.done = true;
      continue;
    }
    const chunk = JSON.parse(data) as {
      choices?: { text: string; finish_reason: string | null }[];
      usage?: { completion_tokens: number } | null;
      error?: { message: string };
    };
    if (chunk.error) out.error = chunk.error.message;
    for (const c of chunk.choices ?? []) {
      if (c.text) {
        out.text += c.text;
        out.chunkTimes.push(clock());
        o.onText?.(c.text);
      }
      out.finishReason = c.finish_reason ?? out.finishReason;
    }
    if (chunk.usage) out.completionTokens = chunk.usage.completion_tokens;
  }
  return out;
}
