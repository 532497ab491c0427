import { test } from 'node:test';
import assert from 'node:assert/strict';
import { measureExchangeMs } from './calibrate-exchange.js';

test('an exchange of ranks that compute and meet: a finite mean wait, none for a single rank', async () => {
  for (const ranks of [2, 3]) {
    const ms = await measureExchangeMs({ ranks, chunkMs: 0.05 });
    assert.ok(Number.isFinite(ms) && ms >= 0, `${ranks} ranks: ${ms}`);
  }
  assert.equal(await measureExchangeMs({ ranks: 1, chunkMs: 0.05 }), 0);
});
