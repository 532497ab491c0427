import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { generate, openModel } from '../engine/index.js';
import { EMBEDDED_MODEL, firstAnswer } from './embedded-model.js';

interface Provenance {
  check: { prompt: number[]; greedy: number[] };
}

const provenance = JSON.parse(
  readFileSync(join(import.meta.dirname, '..', '..', 'models', 'tandem-tiny.json'), 'utf8'),
) as Provenance;

test("the shipped model's greedy tokens equal those of the trainer's own forward at the end of its training", async () => {
  const { prompt, greedy } = provenance.check;
  assert.equal(greedy.length, 24);
  const opened = await openModel(EMBEDDED_MODEL.path, { threads: 1 });
  try {
    const cache = opened.model.newSession({ contextLength: 64, kvType: 'f32' });
    const result = await generate(opened.model, cache, prompt, { maxTokens: greedy.length });
    assert.deepEqual(result.tokens, greedy);
    // Trained, not random: its own text decodes to words of its corpus.
    const text = opened.tokenizer?.decode(result.tokens) ?? '';
    assert.match(text, /[a-z]{3,}/i);
  } finally {
    await opened.close();
  }
});

test('firstAnswer serves the shipped model across 2 local nodes on a free port, asks it over HTTP, serves until closed', async () => {
  const { url, answer, members, parallel, close } = await firstAnswer('And the LORD said', 16);
  // serving until closed, the dashboard too
  assert.equal((await fetch(`${url}/health`)).status, 200);
  await close();
  assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
  assert.match(answer, /[a-z]{3,}/i);
  assert.deepEqual(members, [
    { id: 'node 0', state: 'alive' },
    { id: 'node 1', state: 'alive' },
  ]);
  assert.equal(parallel, 'tp');
  // Closed: the port no longer answers.
  await assert.rejects(fetch(`${url}/health`));
});
