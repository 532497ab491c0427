import { test } from 'node:test';
import assert from 'node:assert/strict';
import { microBatches } from './micro-batches.js';
import { GEMM_TOKENS } from '../kernels/types.js';

const sum = (a: readonly number[]): number => a.reduce((x, y) => x + y, 0);

test('micro-batches: whole lane groups of at least 32 tokens, about 2 per stage, the remainder kept off the one-token path', () => {
  // 3 stages used to get 6 pieces of 21 tokens: 2 lane groups of 16 each, a third of them idle
  assert.deepEqual(microBatches(128, 3), [32, 32, 32, 32]);
  assert.deepEqual(microBatches(128, 2), [32, 32, 32, 32]);
  assert.deepEqual(microBatches(256, 2), [64, 64, 64, 64]);
  assert.deepEqual(
    microBatches(138, 2),
    [32, 32, 32, 42],
    'a remainder under GEMM_TOKENS joins the last piece',
  );
  assert.deepEqual(microBatches(150, 2), [32, 32, 32, 32, 22]);
  for (const stages of [2, 3, 4, 8])
    for (const n of [1, 5, 11, 12, 40, 63, 64, 100, 128, 129, 500, 1000, 4097]) {
      const pieces = microBatches(n, stages);
      assert.equal(sum(pieces), n, `${n} tokens over ${stages} stages: ${pieces.join(',')}`);
      assert.ok(
        pieces.length <= Math.max(2 * stages + 1, Math.ceil(n / 256) + 1),
        `${n}/${stages}: ${pieces.length} pieces`,
      );
      for (const p of pieces) {
        assert.ok(p >= Math.min(n, GEMM_TOKENS), `${n}/${stages}: a piece of ${p}`);
        assert.ok(p < 256 + GEMM_TOKENS, `${n}/${stages}: a piece of ${p}`);
      }
      if (n >= 64)
        for (const p of pieces.slice(0, -1))
          assert.ok(p % 16 === 0 && p >= 32, `${n}/${stages}: a piece of ${p}`);
    }
});

test('micro-batches: a count asked for cuts the prompt evenly', () => {
  assert.deepEqual(microBatches(10, 2, 3), [3, 3, 4]);
  assert.deepEqual(microBatches(2, 2, 5), [1, 1], 'no more pieces than tokens');
});
