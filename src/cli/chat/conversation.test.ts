import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Conversation } from './conversation.js';

test('Conversation: the system message first and kept; turns in order, dropped oldest first', () => {
  const c = new Conversation('sys');
  c.add({ user: 'a', assistant: 'A' });
  c.add({ user: 'b', assistant: 'B' });
  assert.deepEqual(
    c.messagesWith('c').map((m) => `${m.role}:${m.content}`),
    ['system:sys', 'user:a', 'assistant:A', 'user:b', 'assistant:B', 'user:c'],
  );
  assert.ok(c.dropOldest());
  assert.deepEqual(
    c.messagesWith('c').map((m) => m.content),
    ['sys', 'b', 'B', 'c'],
  );
  assert.ok(c.dropOldest());
  assert.ok(!c.dropOldest());
  c.setSystem('');
  assert.deepEqual(c.messagesWith('x'), [{ role: 'user', content: 'x' }]);
  c.setSystem('new');
  c.add({ user: 'x', assistant: 'X' });
  c.reset();
  assert.equal(c.turnCount, 0);
  assert.equal(c.system, 'new');
});
