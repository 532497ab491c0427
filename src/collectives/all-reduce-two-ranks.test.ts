import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createLocalWorld } from './local-world.js';
import { assertIdentical } from './collectives.cases.js';
import type { Communicator } from './communicator.js';
import { createCommunicator } from './create-communicator.js';

test('2-rank ring: random f32 (sum, max), halves of several fragments and odd counts, equal to a + b and identical on both ranks', async () => {
  const comms = await createLocalWorld(2, { timeoutMs: 20_000 });
  try {
    await checkPair(comms);
  } finally {
    await Promise.all(comms.map((c) => c.close()));
  }
});

test('2-rank ring over tcp: fragments written from the caller memory both ways at once', async () => {
  let listening: (address: string) => void = () => undefined;
  const address = new Promise<string>((resolve) => (listening = resolve));
  const common = { size: 2, provider: 'tcp' as const, timeoutMs: 20_000 };
  const root = createCommunicator({
    ...common,
    rank: 0,
    rendezvous: { kind: 'root', address: '127.0.0.1:0' },
    onListening: listening,
  });
  const other = address.then((a) =>
    createCommunicator({ ...common, rank: 1, rendezvous: { kind: 'root', address: a } }),
  );
  const comms = await Promise.all([root, other]);
  try {
    await checkPair(comms);
  } finally {
    await Promise.all(comms.map((c) => c.close()));
  }
});

async function checkPair(comms: readonly Communicator[]): Promise<void> {
  let seed = 12345;
  const rand = (): number => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) * 2 - 1;
  for (const count of [(1 << 20) / 4, 300_001, 1_000_003]) {
    for (const reduce of ['sum', 'max'] as const) {
      const inputs = comms.map(() => Float32Array.from({ length: count }, rand));
      const want = Float32Array.from({ length: count }, (_, i) => {
        const a = inputs[0]![i]!;
        const b = inputs[1]![i]!;
        return reduce === 'sum' ? a + b : Math.max(a, b);
      });
      const data = inputs.map((x) => x.slice());
      await Promise.all(comms.map((c, r) => c.allReduce(data[r]!, { algorithm: 'ring', op: reduce })));
      assertIdentical(data, `${reduce} ${count}`);
      const at = data[0]!.findIndex((v, i) => v !== want[i]);
      assert.equal(at, -1, `${reduce} ${count}: element ${at} is ${data[0]![at]}, expected ${want[at]}`);
    }
  }
}
