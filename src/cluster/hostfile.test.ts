import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isTandemError } from '../errors/index.js';
import { parseHostfile } from './hostfile.js';

test('hostfile: one node per line with optional mem= and speed=, comments ignored', () => {
  const hosts = parseHostfile(
    '# cluster\n10.0.0.1:7100 mem=12G speed=1.5\n\n[::1]:7101   # local\nmac-2.local:7100 mem=512M\n',
  );
  assert.deepEqual(hosts, [
    { address: '10.0.0.1:7100', memLimit: 12 * 1024 ** 3, speed: 1.5 },
    { address: '[::1]:7101' },
    { address: 'mac-2.local:7100', memLimit: 512 * 1024 ** 2 },
  ]);
});

test('hostfile: bad lines name the file and line', () => {
  for (const [text, line] of [
    ['10.0.0.1', 1],
    ['a:1\nb:70000', 2],
    ['a:1 mem=lots', 1],
    ['a:1 speed=0', 1],
    ['a:1 colour=red', 1],
    ['# nothing', 1],
  ] as const) {
    assert.throws(
      () => parseHostfile(text, 'hosts.txt'),
      (e) => isTandemError(e, 'CLUSTER_BAD_HOSTFILE') && e.message.startsWith(`hosts.txt:${line}:`),
      text,
    );
  }
});

test('hostfile: a node listed twice is rejected, naming both lines', () => {
  for (const [text, first, second] of [
    ['a:7000\nb:7000\na:7000', 1, 3],
    ['# c\nHost.local:7000 mem=1G\n\nhost.LOCAL:07000 speed=2', 2, 4],
    ['[::1]:7001\n[::1]:7001', 1, 2],
  ] as const) {
    assert.throws(
      () => parseHostfile(text, 'hosts.txt'),
      (e) =>
        isTandemError(e, 'CLUSTER_BAD_HOSTFILE') &&
        e.message.startsWith(`hosts.txt:${second}: `) &&
        e.message.includes(`is already listed on line ${first}; each node must appear once`) &&
        e.hint.includes('its own port'),
      text,
    );
  }
  assert.equal(parseHostfile('a:7000\na:7001\nb:7000').length, 3);
});
