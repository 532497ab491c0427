import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createCommunicator, type Communicator } from '../../src/collectives/index.js';
import type { ProviderName } from '../../src/fabric/index.js';

/**
 * The collectives over the rdma provider: a 2-rank all-reduce of random f32 vectors (small:
 * the board's one-sided writes; large: the ring's fragments) gives the same bits as over tcp.
 * Both ranks run in this process, each with its own device. Runs in the soft-RoCE guest.
 */
const device = process.env['TANDEM_RDMA_DEVICE'];
const skip = device === undefined ? 'needs an RDMA device (TANDEM_RDMA_DEVICE; npm run test:rdma)' : false;

async function world(provider: ProviderName): Promise<Communicator[]> {
  let listening: (address: string) => void = () => undefined;
  const address = new Promise<string>((resolve) => (listening = resolve));
  const opts = { size: 2, provider, timeoutMs: 120_000, connectTimeoutMs: 120_000 };
  const root = createCommunicator({
    ...opts,
    rank: 0,
    rendezvous: { kind: 'root', address: '127.0.0.1:0' },
    onListening: listening,
  });
  const other = address.then((a) =>
    createCommunicator({ ...opts, rank: 1, rendezvous: { kind: 'root', address: a } }),
  );
  return Promise.all([root, other]);
}

/** Deterministic non-integer values, so that a different summation order would show. */
function vector(rank: number, length: number): Float32Array {
  let s = 0x9e3779b9 ^ (rank * 7919 + length);
  return Float32Array.from({ length }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32 - 0.5;
  });
}

async function reduceAll(provider: ProviderName, lengths: readonly number[]): Promise<Float32Array[]> {
  const w = await world(provider);
  try {
    const out: Float32Array[] = [];
    for (const n of lengths) {
      const xs = [vector(0, n), vector(1, n)];
      await Promise.all(w.map((c, r) => c.allReduce(xs[r] as Float32Array)));
      assert.deepEqual(
        new Uint8Array((xs[0] as Float32Array).buffer),
        new Uint8Array((xs[1] as Float32Array).buffer),
      );
      out.push(xs[0] as Float32Array);
    }
    return out;
  } finally {
    await Promise.all(w.map((c) => c.close()));
  }
}

test('rdma: a 2-rank all-reduce gives the same bits as over tcp', { skip, timeout: 600_000 }, async () => {
  const lengths = [8, 4096, 1 << 20];
  const rdma = await reduceAll('rdma', lengths);
  const tcp = await reduceAll('tcp', lengths);
  lengths.forEach((n, i) =>
    assert.deepEqual(
      new Uint8Array((rdma[i] as Float32Array).buffer),
      new Uint8Array((tcp[i] as Float32Array).buffer),
      `${n} elements`,
    ),
  );
});
