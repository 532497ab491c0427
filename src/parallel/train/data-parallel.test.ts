import { test } from 'node:test';
import assert from 'node:assert/strict';
import { localTrainProvider } from './data-parallel.js';

test('local ranks share memory while ranks x threads fit the cores, else loopback tcp', () => {
  assert.equal(localTrainProvider(2, 1, 2), 'shm');
  assert.equal(localTrainProvider(2, 2, 4), 'shm');
  assert.equal(localTrainProvider(2, 2, 2), 'tcp');
  assert.equal(localTrainProvider(3, 1, 2), 'tcp');
});
