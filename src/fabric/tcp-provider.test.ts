import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createConnection } from 'node:net';
import { isTandemError } from '../errors/index.js';
import { conformance } from './conformance.cases.js';
import { openDevice } from './index.js';
import { putU32 } from './wire.js';

conformance('tcp');

test(
  'tcp: a raw client that skips or fakes the handshake never becomes a queue pair',
  { timeout: 20_000 },
  async () => {
    const dev = await openDevice('tcp');
    const l = await dev.listen({ host: '127.0.0.1', port: 0, secret: 'right' });
    try {
      // 1: data frames straight away (a WRITE to some key): the listener closes the socket
      const frame = new Uint8Array(4 + 24 + 8);
      putU32(frame, 0, 32);
      frame[4] = 2;
      // 2: a hello then a made-up proof: counted as an authentication failure
      const hello = JSON.stringify({ t: 'hello', v: 1, provider: 'tcp', nonce: '00'.repeat(32) });
      const fake = JSON.stringify({ t: 'proof', proof: 'ab'.repeat(32), psn: 1, info: {}, extra: {} });
      const msg = (s: string): Buffer => {
        const b = Buffer.from(s);
        const h = Buffer.alloc(4);
        h.writeUInt32LE(b.length);
        return Buffer.concat([h, b]);
      };
      for (const bytes of [Buffer.from(frame), Buffer.concat([msg(hello), msg(fake)])]) {
        await new Promise<void>((resolve, reject) => {
          const s = createConnection({ host: '127.0.0.1', port: l.port }, () => s.write(bytes));
          const timer = setTimeout(
            () => reject(new Error('the listener kept an unauthenticated socket open')),
            5000,
          );
          s.on('data', () => undefined);
          s.on('error', () => undefined);
          s.on('close', () => {
            clearTimeout(timer);
            resolve();
          });
        });
      }
      assert.equal(l.authFailures, 1);
      assert.equal(dev.stats().authFailures, 1);
      const pd = dev.allocPd();
      await assert.rejects(l.accept({ pd, cq: dev.createCq(), timeoutMs: 100 }), (e: unknown) =>
        isTandemError(e, 'FABRIC_WAIT_TIMEOUT'),
      );
    } finally {
      await l.close();
      await dev.close();
    }
  },
);
