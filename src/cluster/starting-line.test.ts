import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startingLine } from './launcher.js';

test('startingLine: a note where the local nodes want more cores than there are, naming how many fit', () => {
  assert.equal(startingLine(2, 1, 2), 'starting 2 local node(s), 1 thread(s) each');
  assert.equal(startingLine(2, 2, 4), 'starting 2 local node(s), 2 thread(s) each');
  const over = startingLine(3, 1, 2).split('\n');
  assert.equal(over[0], 'starting 3 local node(s), 1 thread(s) each');
  assert.match(over[1]!, /^note: 3 node\(s\) x 1 thread\(s\) want 3 cores and this machine has 2: /);
  assert.match(over[1]!, /slower than 2 node\(s\)$/);
  // threads that alone fill the machine: one node is what fits
  assert.match(startingLine(2, 4, 4), /slower than 1 node\(s\)$/);
});
