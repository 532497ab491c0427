import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { tempModel } from '../engine/testing/temp-model.js';
import type { ApiServer } from './http-server.js';
import { startTestServer } from './testing.js';

/*
 * The server's prefillChunk reaches its scheduler: a prompt that arrives while another request
 * streams is prefilled in pieces of that many tokens. The step hook runs before every forward
 * of a sequence with its generated count, so each prompt piece is one call with 0.
 */

const path = tempModel('tandem-prefill-chunk-', { arch: 'llama', shape: 'tiny', type: 'q8_0', seed: 9 });
const servers: ApiServer[] = [];
after(async () => {
  for (const s of servers) await s.close(0);
});

async function completion(
  url: string,
  prompt: number[],
  maxTokens: number,
  stream: boolean,
): Promise<Response> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0, stream }),
  });
  if (res.status !== 200) assert.fail(`status ${res.status}: ${await res.text()}`);
  return res;
}

/** Prompt pieces of a 60-token prompt sent while a 4-token one streams 100 tokens. */
async function piecesBesideAStream(
  prefillChunk: number | undefined,
): Promise<{ pieces: number; text: string }> {
  let watching = false;
  let pieces = 0;
  const server = await startTestServer(path(), {
    slots: 2,
    ...(prefillChunk !== undefined ? { prefillChunk } : {}),
    // slow steps, so that the second request arrives while the first streams
    stepHook: async (generated) => {
      if (watching && generated === 0) pieces++;
      await sleep(5);
    },
  });
  servers.push(server);
  await server.ready;
  const first = await completion(server.url, [5, 6, 7, 8], 100, true);
  const reader = first.body!.getReader();
  await reader.read(); // the first token's event: the stream decodes from here on
  watching = true;
  const long = Array.from({ length: 60 }, (_, i) => 10 + i);
  const second = (await (await completion(server.url, long, 1, false)).json()) as {
    choices: { text: string }[];
  };
  watching = false;
  // the first stream was still running while the prompt was prefilled in pieces
  assert.equal((await reader.read()).done, false, 'the first stream ended before the prompt was in');
  await reader.cancel();
  return { pieces, text: second.choices[0]!.text };
}

test('prefillChunk sets the prompt pieces beside a running stream; the answer does not change', async () => {
  const small = await piecesBesideAStream(12);
  // 60 tokens in pieces of 12: five pieces, each beside the first stream's decode step
  assert.equal(small.pieces, 5);
  const whole = await piecesBesideAStream(60);
  assert.equal(whole.pieces, 1);
  assert.equal(whole.text, small.text, 'the pieces do not change the tokens');
});
