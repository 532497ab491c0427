import { test } from 'node:test';
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { createServer, connect, type AddressInfo, type Socket } from 'node:net';
import { EAGAIN, MSG_DONTWAIT, rawSocketLib } from './socket-ffi.js';

const lib = rawSocketLib();

test(
  "socket calls: errno() is the failed call's, whatever changed the thread's errno after it",
  { skip: lib === null ? 'koffi or libc cannot provide the socket calls here' : false },
  async () => {
    const l = lib!;
    const accepted: Socket[] = [];
    const server = createServer((s) => void accepted.push(s));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const sock = connect((server.address() as AddressInfo).port, '127.0.0.1');
    try {
      await new Promise<void>((r, j) => sock.once('connect', r).once('error', j));
      const handle = (sock as unknown as { _handle: { fd: number; readStop(): number } })._handle;
      handle.readStop();
      const buf = new Uint8Array(64);
      // nothing to read on a non-blocking receive: -1 with EAGAIN
      assert.equal(l.recv(handle.fd, buf, buf.length, MSG_DONTWAIT), -1);
      // a failing stat sets this thread's errno to ENOENT (Node's fs runs on this thread)
      assert.throws(() => statSync('/nonexistent-tandem-path/x'), { code: 'ENOENT' });
      assert.equal(l.errno(), EAGAIN, "the receive's errno, not the stat's");
      // a successful call leaves the last failure's errno as it was
      assert.equal(l.send(handle.fd, buf, 8, MSG_DONTWAIT), 8);
      assert.equal(l.errno(), EAGAIN);
      // a bad descriptor: EBADF (9 on Linux and macOS)
      assert.equal(l.recv(-1, buf, buf.length, MSG_DONTWAIT), -1);
      assert.equal(l.errno(), 9);
    } finally {
      sock.destroy();
      for (const s of accepted) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    }
  },
);
