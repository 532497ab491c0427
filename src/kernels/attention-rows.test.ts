import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createKernels } from './index.js';
import { loadNativeLib, nativeUnavailableReason } from './native-lib.js';
import { randomFloats } from './testing/random-weights.js';
import type { KvCache, KvCacheType, Kernels } from './types.js';
import { isTandemError } from '../errors/index.js';

/**
 * attentionRows (one decode row of each of several caches in one call) against attention on
 * each row alone: the same bits, for the native job over all rows and for the row-by-row
 * fallback (wasm kernels, or caches in different kernel memories).
 */
const native = await loadNativeLib();
const open: Kernels[] = [];
after(async () => {
  for (const k of open) await k.close();
});

async function kernels(backend: 'wasm' | 'native', threads: number, arenaBytes?: number): Promise<Kernels> {
  const k = await createKernels({ backend, threads, smallJob: 0, ...(arenaBytes ? { arenaBytes } : {}) });
  open.push(k);
  return k;
}

interface Shape {
  heads: number;
  kvHeads: number;
  headDim: number;
  type: KvCacheType;
}

/** Caches filled with random K/V up to each row's position; returns the rows' results both ways. */
function bothWays(
  k: Kernels,
  s: Shape,
  positions: number[],
  seed: number,
): { rows: Float32Array; lone: Float32Array } {
  const layers = 2;
  const layer = 1;
  const maxSeq = Math.max(...positions) + 4;
  const kvw = s.kvHeads * s.headDim;
  const caches: KvCache[] = positions.map((pos, t) => {
    const c = k.createKvCache({ layers, kvHeads: s.kvHeads, headDim: s.headDim, maxSeq, type: s.type });
    const n = pos + 1;
    k.kvStore(c, layer, 0, randomFloats(n * kvw, seed + 2 * t), randomFloats(n * kvw, seed + 2 * t + 1), n);
    return c;
  });
  const qw = s.heads * s.headDim;
  const q = randomFloats(positions.length * qw, seed + 100);
  const rows = new Float32Array(positions.length * qw);
  assert.ok(k.attentionRows, 'these kernels offer attentionRows');
  k.attentionRows(caches, q, rows, { layer, heads: s.heads, positions: Int32Array.from(positions) });
  const lone = new Float32Array(positions.length * qw);
  positions.forEach((pos, t) =>
    k.attention(caches[t] as KvCache, q.subarray(t * qw, (t + 1) * qw), lone.subarray(t * qw, (t + 1) * qw), {
      layer,
      heads: s.heads,
      pos0: pos,
      n: 1,
    }),
  );
  return { rows, lone };
}

const shapes: Shape[] = [
  { heads: 8, kvHeads: 2, headDim: 64, type: 'f32' },
  { heads: 4, kvHeads: 4, headDim: 128, type: 'f16' },
  { heads: 6, kvHeads: 3, headDim: 48, type: 'f32' },
  { heads: 4, kvHeads: 1, headDim: 40, type: 'f16' },
];

for (const backend of ['native', 'wasm'] as const) {
  const skip = backend === 'native' && !native ? `no native kernels here: ${nativeUnavailableReason}` : false;
  for (const threads of [1, 3]) {
    test(
      `${backend}: attentionRows equals attention row by row, bit for bit (${threads} threads)`,
      { skip },
      async () => {
        const k = await kernels(backend, threads);
        for (const [i, s] of shapes.entries()) {
          for (const positions of [[0], [5, 17, 2, 40], [63, 0, 31]]) {
            const { rows, lone } = bothWays(k, s, positions, 10 * i + positions.length);
            assert.deepEqual(rows, lone, `${JSON.stringify(s)} at positions ${positions.join(',')}`);
            assert.ok(
              rows.some((v) => v !== 0),
              'the rows hold results',
            );
          }
        }
      },
    );
  }
}

test(
  'native: caches in different kernel memories run row by row with the same bits',
  { skip: !native },
  async () => {
    // 8 MiB memories and caches of 2.9 MiB each (maxSeq 704): the third starts a second memory
    const k = await kernels('native', 2, 8 << 20);
    const s: Shape = { heads: 8, kvHeads: 8, headDim: 64, type: 'f32' };
    const { rows, lone } = bothWays(k, s, [700, 3, 350], 7);
    assert.ok((k as unknown as { arenas: number }).arenas >= 2, 'the caches span two kernel memories');
    assert.deepEqual(rows, lone);
  },
);

test(
  'attentionRows rejects a positions array of the wrong length, naming both counts',
  { skip: !native },
  async () => {
    const k = await kernels('native', 1);
    const c = k.createKvCache({ layers: 1, kvHeads: 1, headDim: 64, maxSeq: 8, type: 'f32' });
    assert.throws(
      () =>
        k.attentionRows!([c, c], new Float32Array(128), new Float32Array(128), {
          layer: 0,
          heads: 1,
          positions: Int32Array.from([0]),
        }),
      (e: unknown) =>
        isTandemError(e) && e.code === 'KERNELS_BAD_SHAPE' && /1 positions for 2 caches/.test(e.message),
    );
  },
);

test(
  'attentionRows rejects a position past the context with KERNELS_CONTEXT_FULL',
  { skip: !native },
  async () => {
    const k = await kernels('native', 2);
    const c = k.createKvCache({ layers: 1, kvHeads: 1, headDim: 64, maxSeq: 8, type: 'f32' });
    assert.throws(
      () =>
        k.attentionRows!([c], new Float32Array(64), new Float32Array(64), {
          layer: 0,
          heads: 1,
          positions: Int32Array.from([8]),
        }),
      (e: unknown) => isTandemError(e) && e.code === 'KERNELS_CONTEXT_FULL',
    );
  },
);
