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
