import { align } from './wasm-arena.js';
import { op } from './wasm-module.js';
import { ropeAngles, ropeRef } from './ref/ops-ref.js';
import type { WasmContext } from './wasm-handles.js';
import type { RopeParams } from './types.js';
import { rowsIn, rowsOut } from './wasm-rows.js';

/** Rotary angles for positions 0..positions-1: [positions, ropeDim/2] each. */
interface RopeTable {
  positions: number;
  cos: Float32Array;
  sin: Float32Array;
}

/** Positions beyond this are rotated without the cached angle table. */
const ROPE_TABLE_MAX = 1 << 20;

/**
 * cos/sin per position for each RopeParams object (the model passes the same one to every
 * layer), computed once by ropeAngles and grown as positions grow.
 */
export class RopeTables {
  private readonly tables = new WeakMap<RopeParams, RopeTable>();

  /** The table covering `positions`; undefined for positions outside 0..ROPE_TABLE_MAX (the reference then computes them per call). */
  get(params: RopeParams, positions: Int32Array): RopeTable | undefined {
    let top = 0;
    for (const p of positions) {
      if (!(p >= 0 && p < ROPE_TABLE_MAX)) return undefined;
      top = Math.max(top, p + 1);
    }
    const half = (params.ropeDim ?? params.headDim) / 2;
    let table = this.tables.get(params);
    if (!table || table.positions < top) {
      const size = Math.max(top, 2 * (table?.positions ?? 0), 64);
      const next: RopeTable = {
        positions: size,
        cos: new Float32Array(size * half),
        sin: new Float32Array(size * half),
      };
      const from = table?.positions ?? 0;
      if (table) {
        next.cos.set(table.cos);
        next.sin.set(table.sin);
      }
      for (let p = from; p < size; p++)
        ropeAngles(
          p,
          params,
          next.cos.subarray(p * half, (p + 1) * half),
          next.sin.subarray(p * half, (p + 1) * half),
        );
      this.tables.set(params, next);
      table = next;
    }
    return table;
  }
}

/** Rotates x [n, heads, headDim] in place: the native twin when there, else the same products in TypeScript. */
export function ropeRun(
  ctx: WasmContext,
  tables: RopeTables,
  x: Float32Array,
  positions: Int32Array,
  heads: number,
  params: RopeParams,
): void {
  const hd = params.headDim;
  const half = (params.ropeDim ?? hd) / 2;
  const neox = params.style === 'neox';
  const table = tables.get(params, positions);
  if (!table) {
    ropeRef(x, positions, heads, params);
    return;
  }
  const slot = ctx.slots[0];
  const n = positions.length;
  if (ctx.nativeNorm && slot && x.length >= n * heads * hd) {
    // native twin (same products and roundings): x and each token's cos/sin row in the arena
    const arena = slot.arena;
    const xBytes = align(n * heads * hd * 4, 64);
    const xp = arena.scratch(xBytes + n * 2 * half * 4);
    const cp = (xp + xBytes) >>> 2;
    const f32 = arena.f32;
    rowsIn(ctx.pool, arena, xp, x, 1, n * heads * hd);
    for (let t = 0; t < n; t++) {
      const at = (positions[t] as number) * half;
      f32.set(table.cos.subarray(at, at + half), cp + 2 * t * half);
      f32.set(table.sin.subarray(at, at + half), cp + (2 * t + 1) * half);
    }
    ctx.pool.run(
      arena.index,
      op.rope,
      [xp, xp + xBytes, n, heads, hd, half, neox ? 1 : 0],
      n * heads * half * 8,
    );
    rowsOut(ctx.pool, arena, xp, n * heads * hd, x, 1, n * heads * hd);
    return;
  }
  const fr = Math.fround;
  for (let t = 0; t < positions.length; t++) {
    const at = (positions[t] as number) * half;
    for (let h = 0; h < heads; h++) {
      const o = (t * heads + h) * hd;
      for (let i = 0; i < half; i++) {
        const a = neox ? o + i : o + 2 * i;
        const b = neox ? o + i + half : o + 2 * i + 1;
        const x0 = x[a] as number;
        const x1 = x[b] as number;
        const c = table.cos[at + i] as number;
        const s = table.sin[at + i] as number;
        x[a] = fr(x0 * c) - fr(x1 * s);
        x[b] = fr(x0 * s) + fr(x1 * c);
      }
    }
  }
}
