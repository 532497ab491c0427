import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sseData } from './sse-reader.js';

async function* chunks(...parts: string[]): AsyncGenerator<Uint8Array> {
  for (const p of parts) yield new TextEncoder().encode(p);
}

test('sseData: events split anywhere, CR LF or LF, multi-line data, comments skipped, a last event without its blank line', async () => {
  const bytes = new TextEncoder().encode('data: {"é":1}\n\n');
  const split = [bytes.slice(0, 9), bytes.slice(9)]; // inside the two-byte é
  const out: string[] = [];
  async function* raw(): AsyncGenerator<Uint8Array> {
    yield* split;
    yield* chunks(': keep-alive\r\n\r\nevent: x\r\ndata: a\r\ndata: b\r\n\r\nda', 'ta: [DONE]');
  }
  for await (const d of sseData(raw())) out.push(d);
  assert.deepEqual(out, ['{"é":1}', 'a\nb', '[DONE]']);
});
