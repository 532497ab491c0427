import { test } from 'node:test';
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { exchangeSpin } from './node-agent.js';

test('the tensor-parallel exchange spins through the compute only when every compute thread has a core', () => {
  const cores = availableParallelism();
  assert.equal(exchangeSpin(cores, 1), 2000);
  assert.equal(exchangeSpin(1, cores), 2000);
  assert.equal(exchangeSpin(cores + 1, 1), true, 'more nodes than cores: adaptive');
  assert.equal(exchangeSpin(2, cores), true, 'threads default to every core; two such nodes oversubscribe');
  assert.equal(exchangeSpin(2, undefined), true);
});
