import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseChatInput } from './chat-input.js';

test('parseChatInput: messages, the commands, // for a message that starts with /', () => {
  assert.deepEqual(parseChatInput('  Hello there  '), { kind: 'message', text: 'Hello there' });
  assert.deepEqual(parseChatInput('   '), { kind: 'empty' });
  assert.deepEqual(parseChatInput('/help'), { kind: 'help' });
  assert.deepEqual(parseChatInput('/reset'), { kind: 'reset' });
  assert.deepEqual(parseChatInput('/system  Be brief. '), { kind: 'system', text: 'Be brief.' });
  assert.deepEqual(parseChatInput('/system'), { kind: 'system', text: '' });
  assert.deepEqual(parseChatInput('/exit'), { kind: 'exit' });
  assert.deepEqual(parseChatInput('/quit'), { kind: 'exit' });
  assert.deepEqual(parseChatInput('/sytem x'), { kind: 'unknown', name: '/sytem' });
  assert.deepEqual(parseChatInput('//etc/hosts is a file'), {
    kind: 'message',
    text: '/etc/hosts is a file',
  });
});
