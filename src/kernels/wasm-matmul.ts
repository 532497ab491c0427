import { TandemError } from '../errors/index.js';
import { align, type Arena } from './wasm-arena.js';
import { op } from './wasm-module.js';
import { swigluRef } from './ref/ops-ref.js';
import { groups8, isK, isQ32, laneGroups, type WasmContext, type WasmWeight } from './wasm-handles.js';
import { GEMM_TOKENS, GgmlType } from './types.js';
import { rowsIn, rowsOut } from './wasm-rows.js';

/*
 * The matmuls of the wasm/native kernels: x [n, cols] is copied into the weight's arena,
 * quantised there to the weight's dot type, multiplied on all threads of the pool, and the
 * rows [n, rows] copied out. `swiglu` (matmulSwiglu): the weight stacks gate rows over up
 * rows, and SwiGLU is applied in the arena so only [n, rows / 2] is copied out.
 */

/** y = x W^T for n tokens, or SwiGLU of it into `swiglu`; shapes checked by the caller. */
export function matmulRun(
  ctx: WasmContext,
  w: WasmWeight,
  x: Float32Array,
  y: Float32Array,
  n: number,
  swiglu?: Float32Array,
): void {
  if (ctx.grouped && isQ32(w.type)) return matmulGrouped(ctx, w, x, y, n, swiglu);
  const p = preparedFor(ctx, w.type);
  if (p) {
    matmulPrepared(ctx, p, w, x, y, n, true, swiglu);
    return;
  }
  // K-quants: mm_kv below GEMM_TOKENS, and at any n where there is no VNNI GEMM (mm_kt)
  if (ctx.kv && isK(w.type) && !(ctx.kt && n >= GEMM_TOKENS)) {
    matmulKv(ctx, w, x, y, n, swiglu);
    return;
  }
  const { arena, main } = w.slot;
  const cols = w.cols;
  const groups = Math.ceil(cols / 32);
  const xfBytes = align(n * cols * 4, 64);
  const x16Bytes = align(n * cols * 2, 64);
  const xdBytes = align(n * groups * 4, 64);
  const ktGemm = isK(w.type) && ctx.kt && n >= GEMM_TOKENS;
  // the K-quant GEMM's tiles write 16 token rows at once: rows kept off one L1 set (gemmStride)
  const ys = ktGemm ? gemmStride(w.rowsPad) : w.rowsPad;
  const yBytes = align(n * ys * 4, 64);
  const tgroups = Math.ceil(n / 15);
  const xtBytes = ktGemm ? align(tgroups * cols * 16, 64) : 0;
  const dtBytes = ktGemm ? align(tgroups * (cols / 256) * 64, 64) : 0;
  const btBytes = ktGemm ? align(tgroups * (cols / 32) * 64, 64) : 0;
  const base = arena.scratch(xfBytes + x16Bytes + 2 * xdBytes + yBytes + xtBytes + dtBytes + btBytes);
  const xf = base;
  const x16 = xf + xfBytes;
  const xd = x16 + x16Bytes;
  const xs = xd + xdBytes;
  const yp = xs + xdBytes;
  rowsIn(ctx.pool, arena, xf, x, n, cols);
  const tiles = w.rowsPad / 4;
  const work = n * w.rowsPad * cols;
  const pool = ctx.pool;
  if (n > 1 && (isQ32(w.type) || isK(w.type))) {
    pool.run(arena.index, op.quant_part, [isQ32(w.type) ? 0 : 1, xf, n, cols, x16, xd, xs], n * cols);
  } else if (isQ32(w.type)) {
    main.quant_q8_0!(xf, n, cols, x16, xd, xs);
  } else if (isK(w.type)) {
    main.quant_q8_k!(xf, n, cols, x16, xd, xs);
  }
  if (isQ32(w.type)) {
    pool.run(
      arena.index,
      w.type === GgmlType.Q8_0 ? op.mm_q8_0 : op.mm_q4_0,
      [w.ptr, w.scales, cols, x16, xd, xs, n, yp, w.rowsPad, tiles],
      work,
    );
  } else if (ktGemm) {
    // K-quant GEMM (native): the q8_K activations transposed into token groups, 16 tokens on
    // AVX-512 VNNI (kquant-gemm.c), 15 beside a zero token on NEON (kquant-neon.c); the buffers
    // above are sized for ceil(n / 15) groups, which holds either layout
    const xt = yp + yBytes;
    pool.run(
      arena.index,
      op.kt_prep,
      [x16, xd, xs, n, cols, xt, xt + xtBytes, xt + xtBytes + dtBytes],
      n * cols,
    );
    pool.run(
      arena.index,
      op.mm_kt,
      [w.type, w.ptr, w.rowBytes, cols, xt, xt + xtBytes, xt + xtBytes + dtBytes, n, yp, ys, tiles],
      work,
    );
  } else if (isK(w.type)) {
    pool.run(
      arena.index,
      op.mm_k,
      [w.type, w.ptr, w.rowBytes, cols, x16, xd, xs, n, yp, w.rowsPad, tiles],
      work,
    );
  } else {
    if (w.type !== GgmlType.F32) main.round_x!(xf, n * cols, w.type);
    pool.run(arena.index, op.mm_float, [w.type, w.ptr, cols, xf, n, yp, w.rowsPad, tiles], work);
  }
  copyOut(ctx, arena, yp, w, y, n, swiglu, ys);
}

/**
 * Q8_0 / Q4_0 in the grouped layout (ctx.grouped; gemm-avx2.c): x quantised once per call into
 * the grouped activation layout (q8g_prep: xq [n, groups8 * 256] i8, then dx: the block scales
 * [n, groups8 * 8] f32 and 8 x the block sums [n, groups8 * 8] i32), then every tile times
 * every token by one kernel, which gives a token the same bits at any n.
 */
function matmulGrouped(
  ctx: WasmContext,
  w: WasmWeight,
  x: Float32Array,
  y: Float32Array,
  n: number,
  swiglu?: Float32Array,
): void {
  const { arena } = w.slot;
  const cols = w.cols;
  const ng = groups8(cols);
  const xfBytes = align(n * cols * 4, 64);
  const xqBytes = align(n * ng * 256, 64);
  const dxBytes = align(n * ng * 64, 64);
  const xf = arena.scratch(xfBytes + xqBytes + dxBytes + align(n * w.rowsPad * 4, 64));
  const xq = xf + xfBytes;
  const dx = xq + xqBytes;
  const yp = dx + dxBytes;
  rowsIn(ctx.pool, arena, xf, x, n, cols);
  ctx.pool.run(arena.index, op.q8g_prep, [xf, n, cols, xq, dx], n * cols);
  ctx.pool.run(
    arena.index,
    w.type === GgmlType.Q8_0 ? op.mm_q8g : op.mm_q4g,
    [w.ptr, w.scales, cols, xq, dx, n, yp, w.rowsPad, w.rowsPad / 4],
    n * w.rowsPad * cols,
  );
  copyOut(ctx, arena, yp, w, y, n, swiglu);
}

/**
 * K-quants on the native q8_K kernels (mm_kv, AVX-512 or AVX2): x quantised once to q8_K
 * (quant_q8_k: x16 i16, xd scales, xs per-32 sums), stored as i8 in the order the weight type's
 * kernel reads them, with per-16 sums (kv_prep), then each weight row streamed once for up to 8
 * tokens, each token with a lone matvec's bits.
 */
function matmulKv(
  ctx: WasmContext,
  w: WasmWeight,
  x: Float32Array,
  y: Float32Array,
  n: number,
  swiglu?: Float32Array,
): void {
  const { arena, main } = w.slot;
  const cols = w.cols;
  const xfBytes = align(n * cols * 4, 64);
  const x16Bytes = align(n * cols * 2, 64);
  const xdBytes = align(n * (cols / 32) * 4, 64);
  const xqBytes = align(n * cols, 64);
  const bsBytes = align(n * (cols / 16) * 2, 64);
  const xf = arena.scratch(
    xfBytes + x16Bytes + 2 * xdBytes + xqBytes + bsBytes + align(n * w.rowsPad * 4, 64),
  );
  const x16 = xf + xfBytes;
  const xd = x16 + x16Bytes;
  const xs = xd + xdBytes;
  const xq = xs + xdBytes;
  const bs = xq + xqBytes;
  const yp = bs + bsBytes;
  rowsIn(ctx.pool, arena, xf, x, n, cols);
  if (n > 1) ctx.pool.run(arena.index, op.quant_part, [1, xf, n, cols, x16, xd, xs], n * cols);
  else main.quant_q8_k!(xf, n, cols, x16, xd, xs);
  ctx.pool.run(arena.index, op.kv_prep, [x16, n, cols, xq, bs, w.type], n * cols);
  ctx.pool.run(
    arena.index,
    op.mm_kv,
    [w.type, w.ptr, w.rowBytes, cols, xq, xd, bs, n, yp, w.rowsPad, w.rowsPad / 4],
    n * w.rowsPad * cols,
  );
  copyOut(ctx, arena, yp, w, y, n, swiglu);
}

/**
 * A weight type's native prepared-activation kernels (x quantised once per call): the prep
 * and matmul ops and the sizes of the activation buffers they read.
 * - lanes (Q8_0 / Q4_0 where ctx.lanes: gemm-vnni.c, q4-vnni.c): few tokens xq [n, ng * 512]
 *   s8 and dxc [n, ng * 32] (f32 scales, then i32 corrections), ng = laneGroups(cols); GEMM
 *   groups of 16 tokens, dxt [G][nb][32].
 * - blocked (Q8_0 / Q4_0 where ctx.tile: gemm-neon.c): xu [n, nbp * 32] u8 and dx [n, nbp] f32
 *   (nbp: blocks rounded up to even); GEMM groups of 15 tokens beside a zero token, dxt
 *   [G][nb][16] f32.
 * The GEMM quants xt [G][cols / 4][16] u32 have one size in both.
 */
interface Prepared {
  readonly prep: number;
  readonly tprep: number;
  readonly mmv: number;
  readonly mmt: number;
  /** The GEMM and one-token rows in one pass (Q8_0 only). */
  readonly mmtv?: number;
  readonly group: number;
  xBytes(n: number, cols: number): number;
  dBytes(n: number, cols: number): number;
  dtBytes(groups: number, cols: number): number;
}

const lanesBase = {
  prep: op.q8l_prep,
  tprep: op.q8lt_prep,
  group: 16,
  xBytes: (n: number, cols: number) => n * laneGroups(cols) * 512,
  dBytes: (n: number, cols: number) => n * laneGroups(cols) * 128,
  dtBytes: (g: number, cols: number) => align(g * (cols / 32) * 128, 64),
};
const lanesQ8: Prepared = { ...lanesBase, mmv: op.mm_q8l, mmt: op.mm_q8lt, mmtv: op.mm_q8ltv };
const lanesQ4: Prepared = { ...lanesBase, mmv: op.mm_q4l, mmt: op.mm_q4lt };

const blockedBase = {
  prep: op.q8_prep,
  tprep: op.q8t_prep,
  group: 15,
  xBytes: (n: number, cols: number) => align(n * 2 * Math.ceil(cols / 64) * 32, 64),
  dBytes: (n: number, cols: number) => align(n * 2 * Math.ceil(cols / 64) * 4, 64),
  dtBytes: (g: number, cols: number) => align(g * (cols / 32) * 64, 64),
};
const blockedQ8: Prepared = { ...blockedBase, mmv: op.mm_q8v, mmt: op.mm_q8t, mmtv: op.mm_q8tv };
const blockedQ4: Prepared = { ...blockedBase, mmv: op.mm_q4v, mmt: op.mm_q4t };

/** The prepared kernels this build runs `type` on, if any. */
function preparedFor(ctx: WasmContext, type: number): Prepared | undefined {
  const q8 = type === GgmlType.Q8_0;
  if (!q8 && type !== GgmlType.Q4_0) return undefined;
  if (ctx.lanes) return q8 ? lanesQ8 : lanesQ4;
  if (ctx.tile) return q8 ? blockedQ8 : blockedQ4;
  return undefined;
}

/**
 * x quantised once per call, then all rows x all tokens. Few tokens: p.mmv (each row streamed
 * once for up to 8 tokens, each token with a lone matvec's bits); from GEMM_TOKENS on, when
 * `gemm`: p.mmt (tokens across the vector lanes, 8 rows x p.group tokens per tile).
 */
function matmulPrepared(
  ctx: WasmContext,
  p: Prepared,
  w: WasmWeight,
  x: Float32Array,
  y: Float32Array,
  n: number,
  gemm: boolean,
  swiglu?: Float32Array,
): void {
  const { arena } = w.slot;
  const cols = w.cols;
  const xfBytes = align(n * cols * 4, 64);
  const yBytes = align(n * w.rowsPad * 4, 64);
  const tiles = w.rowsPad / 4;
  if (n >= GEMM_TOKENS && gemm) {
    const ys = gemmStride(w.rowsPad);
    const xtBytes = align(Math.ceil(n / p.group) * cols * 16, 64);
    const xf = arena.scratch(
      xfBytes + xtBytes + p.dtBytes(Math.ceil(n / p.group), cols) + align(n * ys * 4, 64),
    );
    const xt = xf + xfBytes;
    const dt = xt + xtBytes;
    const yp = dt + p.dtBytes(Math.ceil(n / p.group), cols);
    rowsIn(ctx.pool, arena, xf, x, n, cols);
    ctx.pool.run(arena.index, p.tprep, [xf, n, cols, xt, dt], n * cols);
    ctx.pool.run(arena.index, p.mmt, [w.ptr, w.scales, cols, xt, dt, n, yp, ys, tiles], n * w.rowsPad * cols);
    copyOut(ctx, arena, yp, w, y, n, swiglu, ys);
    return;
  }
  const xf = arena.scratch(xfBytes + p.xBytes(n, cols) + p.dBytes(n, cols) + yBytes);
  const xq = xf + xfBytes;
  const dx = xq + p.xBytes(n, cols);
  const yp = dx + p.dBytes(n, cols);
  rowsIn(ctx.pool, arena, xf, x, n, cols);
  ctx.pool.run(arena.index, p.prep, [xf, n, cols, xq, dx], n * cols);
  ctx.pool.run(
    arena.index,
    p.mmv,
    [w.ptr, w.scales, cols, xq, dx, n, yp, w.rowsPad, tiles],
    n * w.rowsPad * cols,
  );
  copyOut(ctx, arena, yp, w, y, n, swiglu);
}

/**
 * The prepared GEMMs' output row stride (floats) for a weight of rowsPad rows: an odd multiple
 * of 16 floats, so that the 16 token rows one tile of 16 tokens writes (stride * 4 bytes
 * apart) fall in 16 different L1 sets; at a multiple of 4 KiB (2048 or 11264 rows) they share
 * one set and evict each other as the tile's outputs are stored (measured: docs/benchmarks.md,
 * "A faster prefill").
 */
export function gemmStride(rowsPad: number): number {
  const s = Math.ceil(rowsPad / 16) * 16;
  return (s / 16) % 2 === 0 ? s + 16 : s;
}

/**
 * Copies the result rows (`stride` floats apart in the arena) out; with `swiglu` first applies
 * SwiGLU to them there.
 */
function copyOut(
  ctx: WasmContext,
  arena: Arena,
  yp: number,
  w: WasmWeight,
  y: Float32Array,
  n: number,
  swiglu: Float32Array | undefined,
  stride = w.rowsPad,
): void {
  if (swiglu) {
    const half = w.rows / 2;
    ctx.pool.run(arena.index, op.swiglu_rows, [yp, stride, half, n], n * half * 8);
    rowsOut(ctx.pool, arena, yp, stride, swiglu, n, half);
    return;
  }
  rowsOut(ctx.pool, arena, yp, stride, y, n, w.rows);
}

/**
 * n one-token products, row t bit for bit matvec(w, x[t]): every kernel gives a token
 * matvec's bits below GEMM_TOKENS (types.ts), the prepared kernels keep p.mmv at any n, and the
 * grouped kernel gives the same bits at any n. With `swiglu`, SwiGLU of each row into it.
 */
export function matvecRowsRun(
  ctx: WasmContext,
  w: WasmWeight,
  x: Float32Array,
  y: Float32Array,
  n: number,
  swiglu?: Float32Array,
): void {
  if (ctx.grouped && isQ32(w.type)) return matmulGrouped(ctx, w, x, y, n, swiglu);
  const p = preparedFor(ctx, w.type);
  if (p) {
    matmulPrepared(ctx, p, w, x, y, n, false, swiglu);
    return;
  }
  const step = GEMM_TOKENS - 1;
  const half = w.rows / 2;
  for (let t = 0; t < n; t += step) {
    const m = Math.min(step, n - t);
    matmulRun(
      ctx,
      w,
      x.subarray(t * w.cols, (t + m) * w.cols),
      y.subarray(t * w.rows, (t + m) * w.rows),
      m,
      swiglu?.subarray(t * half, (t + m) * half),
    );
  }
}

/**
 * Tokens 0..n-1 as a matmul of n, then `rows` more each with matvec's bits (x: [n + rows,
 * cols], y: [n + rows, rows of w]; with `swiglu`, SwiGLU of each row into it instead). Q8_0
 * on the prepared kernels with n from GEMM_TOKENS on: one pass over the weights (p.mmtv); Q8_0
 * and Q4_0 in the grouped layout: one matmul of n + rows (its bits do not depend on n).
 */
export function matmulPlusRowsRun(
  ctx: WasmContext,
  w: WasmWeight,
  x: Float32Array,
  y: Float32Array,
  n: number,
  rows: number,
  swiglu?: Float32Array,
): void {
  if (rows === 0) return matmulRun(ctx, w, x, y, n, swiglu);
  if (n === 0) return matvecRowsRun(ctx, w, x, y, rows, swiglu);
  if (ctx.grouped && isQ32(w.type)) return matmulGrouped(ctx, w, x, y, n + rows, swiglu);
  const p = preparedFor(ctx, w.type);
  if (p?.mmtv !== undefined && n >= GEMM_TOKENS)
    return matmulPreparedPlusRows(ctx, p, p.mmtv, w, x, y, n, rows, swiglu);
  // below GEMM_TOKENS in all, every token gets matvec's bits in one matmul
  if (n + rows < GEMM_TOKENS) return matmulRun(ctx, w, x, y, n + rows, swiglu);
  const half = w.rows / 2;
  matmulRun(ctx, w, x.subarray(0, n * w.cols), y.subarray(0, n * w.rows), n, swiglu?.subarray(0, n * half));
  matvecRowsRun(ctx, w, x.subarray(n * w.cols), y.subarray(n * w.rows), rows, swiglu?.subarray(n * half));
}

/** The prefill GEMM of n tokens and `rows` one-token rows in one pass over the weights (mmtv: p.mmtv). */
function matmulPreparedPlusRows(
  ctx: WasmContext,
  p: Prepared,
  mmtv: number,
  w: WasmWeight,
  x: Float32Array,
  y: Float32Array,
  n: number,
  rows: number,
  swiglu: Float32Array | undefined,
): void {
  const { arena } = w.slot;
  const cols = w.cols;
  const total = n + rows;
  const groups = Math.ceil(n / p.group);
  const xfBytes = align(total * cols * 4, 64);
  const xtBytes = align(groups * cols * 16, 64);
  const dtBytes = p.dtBytes(groups, cols);
  const xqBytes = p.xBytes(rows, cols);
  const ys = gemmStride(w.rowsPad);
  const xf = arena.scratch(
    xfBytes + xtBytes + dtBytes + xqBytes + p.dBytes(rows, cols) + align(total * ys * 4, 64),
  );
  const xt = xf + xfBytes;
  const dt = xt + xtBytes;
  const xq = dt + dtBytes;
  const dx = xq + xqBytes;
  const yp = dx + p.dBytes(rows, cols);
  rowsIn(ctx.pool, arena, xf, x, total, cols);
  ctx.pool.run(arena.index, p.tprep, [xf, n, cols, xt, dt], n * cols);
  ctx.pool.run(arena.index, p.prep, [xf + n * cols * 4, rows, cols, xq, dx], rows * cols);
  ctx.pool.run(
    arena.index,
    mmtv,
    [w.ptr, w.scales, cols, xt, dt, n, xq, dx, rows, yp, ys, w.rowsPad / 4],
    total * w.rowsPad * cols,
  );
  copyOut(ctx, arena, yp, w, y, total, swiglu, ys);
}

/**
 * w: [2 * half, cols] (gate rows, then up rows); x: [n + rows, cols], out: [n + rows, half];
 * the rows split as in matmulPlusRowsRun.
 */
export function matmulSwigluRun(
  ctx: WasmContext,
  w: WasmWeight,
  x: Float32Array,
  out: Float32Array,
  n: number,
  rows = 0,
): void {
  const half = w.rows / 2;
  const total = n + rows;
  if (
    !Number.isInteger(half) ||
    !(Number.isInteger(n) && n >= 0 && Number.isInteger(rows) && rows >= 0 && total >= 1) ||
    x.length < total * w.cols ||
    out.length < total * half
  ) {
    throw new TandemError(
      'KERNELS_BAD_SHAPE',
      `${w.name}: fused SwiGLU of [${w.rows}, ${w.cols}] for ${total} tokens got x of ${x.length} and out of ${out.length} elements`,
      {
        hint: 'stack gate and up rows (an even row count); x holds n * cols values, out n * rows / 2',
      },
    );
  }
  if (!ctx.nativeNorm) {
    const y = new Float32Array(total * w.rows);
    matmulPlusRowsRun(ctx, w, x, y, n, rows);
    for (let t = 0; t < total; t++)
      swigluRef(
        y.subarray(t * w.rows, t * w.rows + half),
        y.subarray(t * w.rows + half, (t + 1) * w.rows),
        out.subarray(t * half, (t + 1) * half),
      );
    return;
  }
  matmulPlusRowsRun(ctx, w, x, out, n, rows, out);
}
