import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ReferenceKernels } from '../../kernels/index.js';
import { isTandemError } from '../../errors/index.js';
import { Model } from '../model/model.js';
import { tinyModelFile } from '../model/tiny-model.js';
import { generate, greedy } from './generate.js';

const kernels = new ReferenceKernels();

test('generate: greedy by default, streams each token, stops at a stop token', async () => {
  const model = await Model.load(tinyModelFile({ arch: 'llama', seed: 21, context: 64 }), kernels);
  const streamed: number[] = [];
  const full = await generate(model, model.newSession(), [4, 9, 16], {
    maxTokens: 10,
    onToken: (t) => streamed.push(t),
  });
  assert.equal(full.tokens.length, 10);
  assert.deepEqual(streamed, full.tokens);
  assert.equal(full.stopReason, 'length');
  assert.ok(full.ttftMs > 0 && full.decodeTokS > 0 && full.prefillTokS > 0);
  // Feeding the same prompt by hand gives the same tokens.
  const cache = model.newSession();
  let logits = await model.forward([4, 9, 16], cache);
  for (const expected of full.tokens) {
    assert.equal(greedy(logits), expected);
    logits = await model.forward([expected], cache);
  }
  const stopAt = full.tokens[3]!;
  const stopped = await generate(model, model.newSession(), [4, 9, 16], {
    maxTokens: 10,
    stopTokens: new Set([stopAt]),
  });
  assert.equal(stopped.stopReason, 'stop');
  assert.deepEqual(stopped.tokens, full.tokens.slice(0, full.tokens.indexOf(stopAt) + 1));
});

test('generate: a custom picker sees the history; bad prompts and context overflows are typed errors', async () => {
  const model = await Model.load(tinyModelFile({ arch: 'qwen2', seed: 22, context: 16 }), kernels);
  const seen: number[] = [];
  const r = await generate(model, model.newSession(), [1, 2], {
    maxTokens: 3,
    pick: (_l, history) => (seen.push(history.length), 7),
  });
  assert.deepEqual(r.tokens, [7, 7, 7]);
  assert.deepEqual(seen, [2, 3, 4]);
  await assert.rejects(generate(model, model.newSession(), [], { maxTokens: 3 }), (e) =>
    isTandemError(e, 'GENERATE_PROMPT'),
  );
  await assert.rejects(generate(model, model.newSession(), [1], { maxTokens: 0 }), (e) =>
    isTandemError(e, 'GENERATE_PROMPT'),
  );
  const cache = model.newSession();
  await assert.rejects(
    generate(model, cache, [1, 2, 3, 4, 5, 6], { maxTokens: 12 }),
    (e) => isTandemError(e, 'KV_CONTEXT_FULL') && e.message.includes('16'),
  );
  assert.equal(cache.length, 0, 'nothing was computed');
  const fits = await generate(model, cache, [1, 2, 3, 4, 5, 6], { maxTokens: 11 });
  assert.equal(fits.tokens.length, 11);
});
