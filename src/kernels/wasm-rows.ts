import { copyF32 } from './copy.js';
import type { Arena } from './wasm-arena.js';
import { op } from './wasm-module.js';
import type { ThreadPool } from './pool.js';

/**
 * Copies of at least this many bytes run natively on every thread of the pool; smaller ones
 * on the calling thread (copyF32), where waking the workers or the extra calls would cost
 * more than they save.
 */
const POOL_COPY_BYTES = 256 * 1024;

/** x [n, cols] (dense) into the arena at byte offset `to`, rows `stride` floats apart (default: dense). */
export function rowsIn(
  pool: ThreadPool,
  arena: Arena,
  to: number,
  x: Float32Array,
  n: number,
  cols: number,
  stride = cols,
): void {
  copyRows(pool, arena, to, stride, x, n, cols, true);
}

/** The arena's rows at byte offset `from` (`stride` floats apart) into y [n, cols] (dense). */
export function rowsOut(
  pool: ThreadPool,
  arena: Arena,
  from: number,
  stride: number,
  y: Float32Array,
  n: number,
  cols: number,
): void {
  copyRows(pool, arena, from, stride, y, n, cols, false);
}

/**
 * The activations' copies into and out of an arena (a shared wasm memory): large ones as
 * copy_rows (memcpy) split over the pool's threads where the native library runs, the rest
 * with copyF32 on this thread. Both ends are checked first, since the native copy writes by
 * address.
 */
function copyRows(
  pool: ThreadPool,
  arena: Arena,
  off: number,
  stride: number,
  far: Float32Array,
  n: number,
  cols: number,
  into: boolean,
): void {
  const len = n * cols;
  if (len === 0) return;
  const end = off + ((n - 1) * stride + cols) * 4;
  if (far.length < len || off % 4 !== 0 || stride < cols || end > arena.u8.length)
    throw new RangeError(
      `copyRows: ${n} rows of ${cols} floats (stride ${stride}) at byte ${off} do not fit an array of ${far.length} and an arena of ${arena.u8.length} bytes`,
    );
  const view = far.subarray(0, len);
  const addr =
    len * 4 >= POOL_COPY_BYTES && pool.threads > 1 && pool.runsNative('copy_rows')
      ? pool.address(view)
      : undefined;
  if (addr !== undefined) {
    pool.run(arena.index, op.copy_rows, [addr, off, stride, cols, n, into ? 1 : 0]);
    return;
  }
  const f32 = arena.f32;
  const at = off >>> 2;
  // dense rows in one copy, else row by row
  const rows = stride === cols ? n : 1;
  for (let t = 0; t < n; t += rows) {
    const a = at + t * stride;
    if (into) copyF32(f32, a, view.subarray(t * cols, (t + rows) * cols));
    else copyF32(view, t * cols, f32.subarray(a, a + rows * cols));
  }
}
