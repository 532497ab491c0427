import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { posixAbi, type PosixAbi } from './posix-abi.js';

/** The constants as this machine's C headers define them (gcc), or why they cannot be read. */
function headerValues(): Record<string, number> | string {
  if (process.platform !== 'linux') return 'the header check runs on Linux';
  if (spawnSync('gcc', ['--version']).status !== 0) return 'gcc is missing: run bin/setup.sh';
  const names = [
    'O_RDWR',
    'O_CREAT',
    'O_EXCL',
    'O_NONBLOCK',
    'F_GETFL',
    'MAP_SHARED',
    'MAP_PRIVATE',
    'MAP_FIXED',
    'MAP_ANONYMOUS',
    'MAP_POPULATE',
    'MSG_DONTWAIT',
    'MSG_NOSIGNAL',
    'EAGAIN',
    'EINTR',
    'POLLIN',
    'POLLOUT',
    'SOL_SOCKET',
    'SO_SNDBUF',
    'SO_RCVBUF',
    'IPPROTO_TCP',
    'TCP_USER_TIMEOUT',
  ];
  const dir = mkdtempSync(join(tmpdir(), 'tandem-abi-'));
  try {
    const c = [
      '#define _GNU_SOURCE',
      ...[
        'fcntl.h',
        'sys/mman.h',
        'sys/socket.h',
        'netinet/in.h',
        'netinet/tcp.h',
        'poll.h',
        'errno.h',
        'stdio.h',
      ].map((h) => `#include <${h}>`),
      'int main(void) {',
      ...names.map((n) => `  printf("${n} %ld\\n", (long)(${n}));`),
      `  printf("PROT_READ_WRITE %ld\\n", (long)(PROT_READ | PROT_WRITE));`,
      '  return 0;',
      '}',
    ].join('\n');
    writeFileSync(join(dir, 'abi.c'), c);
    execFileSync('gcc', ['-o', join(dir, 'abi'), join(dir, 'abi.c')], { timeout: 60_000 });
    const out = execFileSync(join(dir, 'abi'), { encoding: 'utf8' });
    return Object.fromEntries(
      out
        .trim()
        .split('\n')
        .map((l) => [l.split(' ')[0], Number(l.split(' ')[1])]),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('posix-abi', () => {
  const values = headerValues();
  it(
    "Linux: every constant is what this machine's C headers say",
    { skip: typeof values === 'string' ? values : false },
    () => {
      const abi = posixAbi('linux')!;
      for (const [name, value] of Object.entries(values as Record<string, number>))
        assert.equal(abi[name as keyof PosixAbi], value, name);
    },
  );

  it('has a table for Linux and macOS only, each naming its library and errno function', () => {
    assert.equal(posixAbi('linux')!.libc, 'libc.so.6');
    assert.equal(posixAbi('darwin')!.libc, 'libSystem.B.dylib');
    assert.equal(posixAbi('darwin')!.errnoFunction, '__error');
    assert.equal(posixAbi('win32'), undefined);
    // what macOS lacks is said, not faked: no pre-faulting mmap, no fallocate, no user timeout
    const mac = posixAbi('darwin')!;
    assert.equal(mac.MAP_POPULATE, 0);
    assert.equal(mac.hasFallocate, false);
    assert.equal(mac.TCP_USER_TIMEOUT, undefined);
    assert.equal(mac.shmListing, 'registry');
    assert.equal(mac.shmNameMax, 31);
  });

  it('every flag of one group is a distinct bit on both platforms (a wrong table would collide)', () => {
    for (const abi of [posixAbi('linux')!, posixAbi('darwin')!]) {
      const open = [abi.O_RDWR, abi.O_CREAT, abi.O_EXCL, abi.O_NONBLOCK];
      const map = [abi.MAP_SHARED, abi.MAP_PRIVATE, abi.MAP_FIXED, abi.MAP_ANONYMOUS];
      for (const group of [open, map])
        for (let i = 0; i < group.length; i++)
          for (let j = i + 1; j < group.length; j++) assert.equal(group[i]! & group[j]!, 0, abi.platform);
    }
  });
});
