import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Arena } from './wasm-arena.js';
import { ThreadPool } from './pool.js';
import { kernelNames, kernelsModule } from './wasm-module.js';
import { loadNativeLib } from './native-lib.js';
import { rowsIn, rowsOut } from './wasm-rows.js';

/*
 * The activations' copies into and out of an arena: rows of a dense array to rows `stride`
 * floats apart and back, on the native library's pool copy (large copies on 2 threads) and on
 * the calling thread (small ones, or no native library), always exactly the values and nothing
 * beside them.
 */

const native = await loadNativeLib();
const pools: ThreadPool[] = [];
after(async () => {
  for (const p of pools) await p.close();
});

async function context(withNative: boolean): Promise<{ pool: ThreadPool; arena: Arena }> {
  const pool = await ThreadPool.create(
    await kernelsModule(),
    2,
    kernelNames,
    withNative ? native : undefined,
  );
  pools.push(pool);
  const arena = new Arena(0, 64 << 20);
  pool.addMemory(arena.memory);
  return { pool, arena };
}

const variants = native ? [true, false] : [false];

for (const withNative of variants) {
  // 40 x 3000 floats (480 KB) goes to the pool's copy where it runs; 2 x 3000 stays on this thread
  for (const [n, cols, stride] of [
    [40, 3000, 3000],
    [40, 3000, 3013],
    [2, 3000, 3013],
    [1, 70_000, 70_000],
  ] as const) {
    test(`rows of ${n} x ${cols} floats (stride ${stride}) into an arena and back${withNative ? '' : ', without the native library'}`, async () => {
      const { pool, arena } = await context(withNative);
      const off = arena.scratch(4 * (n * stride + 64)) + 128; // not at the region's start
      const f32 = arena.f32;
      const base = off >>> 2;
      f32.fill(-1, base - 32, base + n * stride + 32);
      const x = Float32Array.from({ length: n * cols + 5 }, (_, i) => i * 0.5 + 1);
      rowsIn(pool, arena, off, x, n, cols, stride);
      for (let t = 0; t < n; t++) {
        for (let j = 0; j < stride; j++) {
          const want = j < cols ? (x[t * cols + j] as number) : -1;
          if (f32[base + t * stride + j] !== want)
            assert.fail(`row ${t}, column ${j}: ${f32[base + t * stride + j]} where ${want} belongs`);
        }
      }
      assert.equal(f32[base - 1], -1, 'the float before the rows is untouched');
      assert.equal(f32[base + (n - 1) * stride + cols], -1, 'the float after the last row is untouched');
      const y = new Float32Array(n * cols + 3).fill(7);
      rowsOut(pool, arena, off, stride, y, n, cols);
      assert.deepEqual(y.subarray(0, n * cols), x.subarray(0, n * cols));
      assert.deepEqual(Array.from(y.subarray(n * cols)), [7, 7, 7], 'nothing past the rows is written');
    });
  }
}

test('rows that do not fit the array or the arena are refused before anything is copied', async () => {
  const { pool, arena } = await context(native !== undefined);
  const off = arena.scratch(4 * 100_000);
  arena.f32.fill(3, off >>> 2, (off >>> 2) + 100_000);
  const x = new Float32Array(200_000).fill(9);
  assert.throws(() => rowsIn(pool, arena, off, x.subarray(0, 99_999), 1, 100_000), RangeError);
  assert.throws(() => rowsOut(pool, arena, off, 100_000, new Float32Array(10), 2, 100_000), RangeError);
  assert.throws(() => rowsIn(pool, arena, arena.u8.length - 400, x, 1, 100_000), RangeError);
  assert.throws(() => rowsIn(pool, arena, off, x, 2, 100_000, 50_000), RangeError, 'a stride below the row');
  assert.ok(
    arena.f32.subarray(off >>> 2, (off >>> 2) + 100_000).every((v) => v === 3),
    'the arena is untouched',
  );
});
