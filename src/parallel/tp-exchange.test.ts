import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createLocalWorld } from '../collectives/local-world.js';
import { isTandemError } from '../errors/index.js';
import { f16ToF32, f32ToF16 } from '../kernels/half.js';
import { sumTree, treeSpares, type SumTree } from '../kernels/reduce-native.js';
import { CollectiveShardComm } from './shard-comm.js';
import { exchangeBufferBytes } from '../collectives/index.js';
import { TpExchange } from './tp-exchange.js';
import type { WireFormat } from './wire.js';

/** Deterministic values in [-scale, scale). */
function values(n: number, seed: number, scale = 1): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    out[i] = ((s >>> 0) / 2 ** 32 - 0.5) * 2 * scale;
  }
  return out;
}

async function world(
  size: number,
  wire: WireFormat,
  chunk?: number,
): Promise<{ ex: TpExchange[]; close: () => Promise<void> }> {
  const comms = await createLocalWorld(size, { timeoutMs: 10_000 });
  const ex = await Promise.all(
    comms.map((group) =>
      TpExchange.connect({
        group,
        provider: 'loopback',
        host: '127.0.0.1',
        secret: 's',
        wire,
        timeoutMs: 10_000,
        ...(chunk ? { chunk } : {}),
      }),
    ),
  );
  return {
    ex,
    close: async () => {
      await Promise.all(ex.map((e) => e.close()));
      await Promise.all(comms.map((c) => c.close()));
    },
  };
}

for (const size of [2, 3, 4]) {
  test(`${size} ranks: f32 all-reduce is the pairwise-tree sum, bit-identical on every rank, over many calls and chunks`, async () => {
    const w = await world(size, 'f32', 1000);
    try {
      for (let call = 0; call < 40; call++) {
        // Lengths cross the 1000-element chunk so long vectors go in several exchanges.
        const n = [1, 7, 2048, 2500][call % 4]!;
        const parts = w.ex.map((_, r) => values(n, 1 + call * 31 + r));
        const expected = new Float32Array(n);
        // (p0 + p1) + p2 and (p0 + p1) + (p2 + p3): the order one node adds its leaves in
        const at = (r: number, i: number): number => parts[r]![i] as number;
        for (let i = 0; i < n; i++) {
          const low = Math.fround(at(0, i) + at(1, i));
          const high = size === 4 ? Math.fround(at(2, i) + at(3, i)) : size === 3 ? at(2, i) : 0;
          expected[i] = size === 2 ? low : Math.fround(low + high);
        }
        const xs = parts.map((p) => p.slice());
        await Promise.all(w.ex.map((e, r) => e.allReduceSum(xs[r]!)));
        for (let r = 0; r < size; r++) assert.deepEqual(xs[r], expected, `call ${call}, rank ${r}`);
      }
      // what placement counts against a node's memory limit is what the exchange registered
      for (const e of w.ex) assert.equal(e.bufferBytes, exchangeBufferBytes(size, 1000));
    } finally {
      await w.close();
    }
  });
}

test("group sums: ranks hand over several pieces and every rank adds them in the group's tree, through the exchange and the communicator alike", async () => {
  // 3 ranks holding 2, 2 and 1 pieces (SmolLM2's 9 heads over 3 ranks): the leaf tree's top over the 5
  const group = {
    counts: [2, 2, 1],
    tree: [
      [0, [1, 2]],
      [3, 4],
    ] as SumTree,
  };
  for (const wire of ['f32', 'f16', 'q8'] as const) {
    const w = await world(3, wire, 1000);
    const comms = await createLocalWorld(3, { timeoutMs: 10_000 });
    const viaComm = comms.map((c) => new CollectiveShardComm(c, { wire }));
    try {
      for (const m of [5, 2048, 2500]) {
        // 2500 values of 2 pieces cross the 1000-value chunk: runs of 500 per piece
        const xs = group.counts.map((count, r) => values(count * m, 900 + m + r, 8));
        const pieces = xs.flatMap((x, r) =>
          Array.from({ length: group.counts[r]! }, (_, q) => x.slice(q * m, (q + 1) * m)),
        );
        const expected = new Float32Array(m);
        sumTree(
          group.tree,
          pieces,
          expected,
          Array.from({ length: treeSpares(group.tree) }, () => new Float32Array(m)),
        );
        const a = xs.map((x) => x.slice());
        const b = xs.map((x) => x.slice());
        await Promise.all(w.ex.map((e, r) => e.allReduceSum(a[r]!, undefined, group)));
        await Promise.all(viaComm.map((c, r) => c.allReduceSum(b[r]!, group)));
        for (let r = 0; r < 3; r++) {
          const gotA = a[r]!.subarray(0, m);
          const gotB = b[r]!.subarray(0, m);
          if (wire === 'f32')
            assert.deepEqual(gotA, expected, `m ${m}, rank ${r}: the tree over every piece`);
          assert.deepEqual(gotA, a[0]!.subarray(0, m), `${wire}, m ${m}: rank ${r} equals rank 0`);
          if (m <= 1000 || wire === 'f32')
            assert.deepEqual(gotB, gotA, `${wire}, m ${m}, rank ${r}: the communicator sums as the exchange`);
        }
        if (wire !== 'f32')
          for (let i = 0; i < m; i++)
            assert.ok(
              Math.abs((a[0]![i] as number) - (expected[i] as number)) <=
                5 * 8 * (wire === 'f16' ? 2 ** -10 : 1 / 127),
              `${wire} value ${i}`,
            );
      }
    } finally {
      await w.close();
      await Promise.all(comms.map((c) => c.close()));
    }
  }
});

test('f16 and q8 wires: every rank sums the same rounded parts (identical results, within the rounding bound)', async () => {
  for (const wire of ['f16', 'q8'] as const) {
    const size = 3;
    const w = await world(size, wire);
    try {
      const n = 2048;
      const parts = w.ex.map((_, r) => values(n, 77 + r, 4));
      const xs = parts.map((p) => p.slice());
      await Promise.all(w.ex.map((e, r) => e.allReduceSum(xs[r]!)));
      for (let r = 1; r < size; r++) assert.deepEqual(xs[r], xs[0], `${wire}: rank ${r} equals rank 0`);
      // Bound: f16 rounds each part to 11 significant bits; q8 to max|block| / 254 per part.
      for (let i = 0; i < n; i++) {
        const exact = parts.reduce((a, p) => a + (p[i] as number), 0);
        const bound = wire === 'f16' ? size * 4 * 2 ** -11 : (size * 4) / 254;
        assert.ok(
          Math.abs((xs[0]![i] as number) - exact) <= bound,
          `${wire} value ${i}: ${xs[0]![i]} vs ${exact}`,
        );
      }
      if (wire === 'f16') {
        // The own part is rounded too: with one rank's part zero elsewhere, the result is exactly f16(part).
        const only = w.ex.map((_, r) => (r === 1 ? values(8, 5) : new Float32Array(8)));
        const want = Float32Array.from(only[1]!, (v) => f16ToF32(f32ToF16(v)));
        await Promise.all(w.ex.map((e, r) => e.allReduceSum(only[r]!)));
        for (const x of only) assert.deepEqual(x, want);
      }
    } finally {
      await w.close();
    }
  }
});

test('allGather puts every rank part in rank order; payload bytes follow the wire', async () => {
  const w = await world(4, 'q8');
  try {
    const outs = w.ex.map(() => new Float32Array(8));
    await Promise.all(w.ex.map((e, r) => e.allGather(Float32Array.of(r * 10, r + 0.5), outs[r]!)));
    for (const out of outs) assert.deepEqual([...out], [0, 0.5, 10, 1.5, 20, 2.5, 30, 3.5]);
    assert.equal(w.ex[0]!.payloadBytes(2048, 'f32'), 8192);
    assert.equal(w.ex[0]!.payloadBytes(2048, 'f16'), 4096);
    assert.equal(w.ex[0]!.payloadBytes(2048), 2048 + 4 * 64);
  } finally {
    await w.close();
  }
});

test('abort ends a pending exchange at once with a typed error', async () => {
  const w = await world(2, 'f32');
  try {
    // Rank 1 never joins: rank 0 waits until aborted.
    const pending = w.ex[0]!.allReduceSum(new Float32Array(16));
    setTimeout(() => w.ex[0]!.abort('peer gone'), 20);
    await assert.rejects(pending, (e) => isTandemError(e, 'PAR_PEER_LOST'));
    await assert.rejects(w.ex[0]!.allReduceSum(new Float32Array(4)), (e) => isTandemError(e, 'PAR_EXCHANGE'));
  } finally {
    await w.close();
  }
});

test('q8 error feedback: rounding errors no longer pile up in a residual stream fed by many all-reduces', async () => {
  const size = 2;
  const n = 512;
  const calls = 40;
  const drift = async (feedback: boolean): Promise<number> => {
    const w = await world(size, 'q8');
    try {
      const exact = new Float64Array(n);
      const residual = w.ex.map(() => new Float32Array(n));
      const carries = w.ex.map(() => (feedback ? new Float32Array(n) : undefined));
      for (let call = 0; call < calls; call++) {
        const parts = w.ex.map((_, r) => values(n, 1000 + call * 7 + r));
        for (const p of parts) for (let i = 0; i < n; i++) exact[i]! += p[i] as number;
        await Promise.all(w.ex.map((e, r) => e.allReduceSum(parts[r]!, carries[r])));
        for (let r = 0; r < size; r++) for (let i = 0; i < n; i++) residual[r]![i]! += parts[r]![i] as number;
      }
      assert.deepEqual(residual[1], residual[0], 'ranks stay identical with feedback too');
      let err = 0;
      for (let i = 0; i < n; i++)
        err = Math.max(err, Math.abs((residual[0]![i] as number) - (exact[i] as number)));
      return err;
    } finally {
      await w.close();
    }
  };
  const plain = await drift(false);
  const fed = await drift(true);
  // Without feedback 40 independent roundings add up (~sqrt(40) of one); with it only the last call's stays.
  assert.ok(fed < plain / 2, `feedback drift ${fed} vs plain ${plain}`);
  assert.ok(
    fed <= (2 * 2) / 254 + 1e-4,
    `with feedback the stream misses at most one rounding per rank (${fed})`,
  );
});
