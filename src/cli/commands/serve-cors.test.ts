import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../../errors/index.js';
import { corsList } from './serve.js';

test('--cors takes origins as a browser sends them, or *; anything else is a usage error naming it', () => {
  assert.deepEqual(corsList('http://localhost:3000, https://chat.example.org'), [
    'http://localhost:3000',
    'https://chat.example.org',
  ]);
  assert.deepEqual(corsList('*'), ['*']);
  for (const [text, named] of [
    ['http://localhost:3000/', 'http://localhost:3000/'],
    ['localhost:3000', 'localhost:3000'],
    ['ftp://files.example', 'ftp://files.example'],
    ['https://a.example/path', 'https://a.example/path'],
    [' , ', 'names no origin'],
  ] as const)
    assert.throws(
      () => corsList(text),
      (e) => isTandemError(e, 'CLI_USAGE') && e.message.includes(named) && /--cors http/.test(e.hint),
      text,
    );
});
