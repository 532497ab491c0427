import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TandemError, codeTables, errorCategories, exitCodeFor, isTandemError } from './index.js';

test('error codes are unique across layer tables and use known categories', () => {
  const seen = new Map<string, string>();
  for (const [layer, table] of Object.entries(codeTables)) {
    for (const [code, category] of Object.entries(table)) {
      assert.ok(!seen.has(code), `${code} is defined by both ${seen.get(code)} and ${layer}`);
      seen.set(code, layer);
      assert.ok(errorCategories.includes(category), `${code} has unknown category ${category}`);
      assert.match(code, /^[A-Z][A-Z0-9_]*$/);
    }
  }
});

test('TandemError carries code, category from the table, hint and details', () => {
  const error = new TandemError('TIMEOUT', 'rank 3 did not join within 30000 ms', {
    hint: 'start the missing node or raise --join-timeout',
    details: { rank: 3 },
  });
  assert.equal(error.category, 'timeout');
  assert.equal(error.hint, 'start the missing node or raise --join-timeout');
  assert.deepEqual(error.details, { rank: 3 });
  assert.ok(isTandemError(error, 'TIMEOUT'));
  assert.ok(!isTandemError(error, 'INTERNAL'));
  assert.ok(!isTandemError(new Error('x')));
  assert.deepEqual(JSON.parse(JSON.stringify(error)).code, 'TIMEOUT');
});

test('each category has its own exit code', () => {
  const codes = errorCategories.map(exitCodeFor);
  assert.equal(new Set(codes).size, codes.length);
  assert.ok(codes.every((c) => c !== 0 && c !== 1));
});
