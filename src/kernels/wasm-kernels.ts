import { TandemError } from '../errors/index.js';
import { Arena, BASE, align } from './wasm-arena.js';
import { ThreadPool } from './pool.js';
import type { NativeLib } from './native-lib.js';
import { kernelNames, kernelsModule, op } from './wasm-module.js';
import { resolveSlice, type SlicedWeight } from './weight-source.js';
import { f16ToF32 } from './half.js';
import { checkMatmul } from './checks.js';
import { dequantRow } from './ref/quant-ref.js';
import { rmsNormRef, softmaxRef, swigluRef } from './ref/ops-ref.js';
import {
  copyRows,
  groupedTileBytes,
  groups8,
  isQ32,
  laneGroups,
  laneRowBytes,
  own,
  WasmWeight,
  type ArenaSlot,
  type Fn,
  type WasmContext,
} from './wasm-handles.js';
import { matmulPlusRowsRun, matmulRun, matmulSwigluRun, matvecRowsRun } from './wasm-matmul.js';
import { RopeTables, ropeRun } from './wasm-rope.js';
import { attentionRowsRun, attentionRun, createKvCacheIn, kvStoreRun } from './wasm-attention.js';
import { rowsIn, rowsOut } from './wasm-rows.js';
import {
  GgmlType,
  type GgmlTypeId,
  type AttentionParams,
  type AttentionRowsParams,
  type Kernels,
  type KvCache,
  type KvCacheOptions,
  type RopeParams,
  type Weight,
  type WeightSource,
} from './types.js';

/** Weights and caches per memory before a new one is started (a wasm32 memory holds 4 GiB). */
export const DEFAULT_ARENA_BYTES = 3 * 1024 ** 3;

/**
 * The WebAssembly SIMD backend: weights and KV caches live in shared memories (arenas of at
 * most `arenaBytes`), activations are copied in and results out per call, and matmul and
 * attention run on all threads of the pool.
 */
export class WasmKernels implements Kernels {
  private readonly slots: ArenaSlot[] = [];
  private readonly ropeTables = new RopeTables();
  /** The parts in other files (matmul, rope, attention) see the pool and arenas through this. */
  private readonly ctx: WasmContext;

  private constructor(
    private readonly pool: ThreadPool,
    private readonly arenaBytes: number,
    readonly backend: 'wasm' | 'native',
    /** For 'native': the instruction set the C kernels were compiled for. */
    readonly isa: string,
    /** Which native prepared-activation kernels there are (WasmContext: kt, tile, lanes, grouped). */
    prepared: { kt: boolean; tile: boolean; lanes: boolean; grouped: boolean },
    /** rmsNorm and rope run the native (bit-identical) kernels. */
    private readonly nativeNorm: boolean,
    /** K-quants run the native q8_K kernels (mm_kv). */
    kv = false,
  ) {
    this.ctx = { pool, slots: this.slots, ...prepared, nativeNorm, kv };
  }

  get threads(): number {
    return this.pool.threads;
  }

  get gemmGroup(): number | undefined {
    return this.ctx.lanes ? 16 : this.ctx.tile ? 15 : undefined;
  }

  /** Memories in use (more than one once weights pass arenaBytes). */
  get arenas(): number {
    return this.slots.length;
  }

  static async create(
    threads: number,
    arenaBytes = DEFAULT_ARENA_BYTES,
    native?: NativeLib,
    smallJob?: number,
  ): Promise<WasmKernels> {
    const module = await kernelsModule();
    const pool = await ThreadPool.create(module, Math.max(1, Math.floor(threads)), kernelNames, native);
    if (smallJob !== undefined) pool.smallJob = smallJob;
    return new WasmKernels(
      pool,
      arenaBytes,
      native ? 'native' : 'wasm',
      native ? native.isa : 'wasm-simd128',
      {
        kt: native?.prototypes.mm_kt !== undefined,
        tile: native?.prototypes.mm_q8v !== undefined,
        lanes: native?.prototypes.repack_q8l !== undefined,
        grouped: native?.prototypes.mm_q8g !== undefined,
      },
      native?.prototypes.rms_norm !== undefined,
      native?.prototypes.mm_kv !== undefined,
    );
  }

  /** The arena to place `bytes` of long-lived data in: the newest one, or a new one. */
  private slotFor(bytes: number): ArenaSlot {
    const last = this.slots[this.slots.length - 1];
    if (last && last.arena.fits(bytes)) return last;
    if (bytes > this.arenaBytes) {
      throw new TandemError(
        'KERNELS_OUT_OF_MEMORY',
        `a single tensor of ${bytes} bytes exceeds the ${this.arenaBytes}-byte kernel memory limit`,
        {
          hint: 'split the tensor across nodes (tensor parallel) or use a smaller model',
          details: { bytes },
        },
      );
    }
    const arena = new Arena(this.slots.length, BASE + this.arenaBytes);
    const main = this.pool.addMemory(arena.memory) as Record<string, Fn>;
    const slot = { arena, main };
    this.slots.push(slot);
    return slot;
  }

  uploadWeight(source: WeightSource): Weight {
    const s = resolveSlice(source);
    if (this.ctx.lanes && isQ32(s.type)) return this.uploadLanes(s);
    if (this.ctx.grouped && isQ32(s.type)) return this.uploadGrouped(s);
    const rowsPad = align(s.rows, 4);
    const nb = s.cols / 32;
    const q32 = isQ32(s.type);
    const rowBytes = q32 ? (s.type === GgmlType.Q8_0 ? s.cols : s.cols / 2) : s.rowBytes;
    const scaleBytes = q32 ? rowsPad * nb * 4 : 0;
    const slot = this.slotFor(rowsPad * rowBytes + scaleBytes + 128);
    const a = slot.arena;
    const ptr = a.alloc(rowsPad * rowBytes);
    const scales = q32 ? a.alloc(scaleBytes) : 0;
    if (q32) {
      // Stage raw rows in scratch a chunk at a time, then repack in wasm.
      const chunk = Math.max(1, Math.min(s.rows, Math.floor((8 << 20) / s.rowBytes)));
      const stage = a.scratch(chunk * s.rowBytes);
      const blockBytes = s.type === GgmlType.Q8_0 ? 34 : 18;
      for (let r0 = 0; r0 < s.rows; r0 += chunk) {
        const rows = Math.min(chunk, s.rows - r0);
        copyRows(a, s, r0, rows, stage, s.rowBytes);
        slot.main.repack_q!(stage, rows, r0, s.cols, blockBytes, blockBytes - 2, ptr, scales);
      }
    } else {
      copyRows(a, s, 0, s.rows, ptr, rowBytes);
    }
    return new WasmWeight(s.type, s.rows, s.cols, s.name, slot, ptr, scales, rowsPad, rowBytes);
  }

  /**
   * Q8_0 / Q4_0 on the VNNI path: the raw rows staged in scratch a chunk at a time and re-laid
   * into the lanes layout (laneGroups) by tk_repack_q8l / tk_repack_q4l on all threads; the
   * padding rows get zero weights and scales. The layout replaces the tile layout, so the
   * weights are held once.
   */
  private uploadLanes(s: SlicedWeight): Weight {
    const rowsPad = align(s.rows, 4);
    const ng = laneGroups(s.cols);
    const q8 = s.type === GgmlType.Q8_0;
    const rowBytes = laneRowBytes(s.type, s.cols);
    const slot = this.slotFor(rowsPad * rowBytes + rowsPad * ng * 32 + 128);
    const a = slot.arena;
    const ptr = a.alloc(rowsPad * rowBytes);
    const scales = a.alloc(rowsPad * ng * 32);
    const chunk = Math.max(1, Math.min(s.rows, Math.floor((8 << 20) / s.rowBytes)));
    const stage = a.scratch(chunk * s.rowBytes);
    for (let r0 = 0; r0 < s.rows; r0 += chunk) {
      const rows = Math.min(chunk, s.rows - r0);
      copyRows(a, s, r0, rows, stage, s.rowBytes);
      this.pool.run(
        a.index,
        q8 ? op.repack_q8l : op.repack_q4l,
        [stage, rows, r0, s.cols, ptr, scales],
        rows * s.cols,
      );
    }
    a.u8.fill(q8 ? 0x80 : 0x88, ptr + s.rows * rowBytes, ptr + rowsPad * rowBytes);
    a.u8.fill(0, scales + s.rows * ng * 32, scales + rowsPad * ng * 32);
    return new WasmWeight(s.type, s.rows, s.cols, s.name, slot, ptr, scales, rowsPad, rowBytes);
  }

  /**
   * Q8_0 / Q4_0 on the grouped path: the raw rows staged in scratch a chunk of whole tiles at a
   * time and re-laid into the grouped layout (groupedTileBytes) by tk_repack_q8g / tk_repack_q4g
   * on all threads, which give the last tile's padding rows zero weights and scales. The layout
   * replaces the tile layout, so the weights are held once.
   */
  private uploadGrouped(s: SlicedWeight): Weight {
    const rowsPad = align(s.rows, 4);
    const rowBytes = groupedTileBytes(s.type, s.cols) / 4;
    const scaleBytes = this.scaleBytes(s.type, s.cols, rowsPad);
    const slot = this.slotFor(rowsPad * rowBytes + scaleBytes + 128);
    const a = slot.arena;
    const ptr = a.alloc(rowsPad * rowBytes);
    const scales = a.alloc(scaleBytes);
    const chunk = Math.max(4, Math.floor((8 << 20) / s.rowBytes / 4) * 4);
    const stage = a.scratch(Math.min(chunk, s.rows) * s.rowBytes);
    for (let r0 = 0; r0 < s.rows; r0 += chunk) {
      const rows = Math.min(chunk, s.rows - r0);
      copyRows(a, s, r0, rows, stage, s.rowBytes);
      this.pool.run(
        a.index,
        s.type === GgmlType.Q8_0 ? op.repack_q8g : op.repack_q4g,
        [stage, rows, r0, s.cols, ptr, scales],
        rows * s.cols,
      );
    }
    return new WasmWeight(s.type, s.rows, s.cols, s.name, slot, ptr, scales, rowsPad, rowBytes);
  }

  /** Bytes of a Q8_0 / Q4_0 weight's scales in this build's layout. */
  private scaleBytes(type: GgmlTypeId, cols: number, rowsPad: number): number {
    if (this.ctx.lanes) return rowsPad * laneGroups(cols) * 32;
    if (this.ctx.grouped) return rowsPad * groups8(cols) * 32;
    return rowsPad * (cols / 32) * 4;
  }

  releaseWeight(weight: Weight): void {
    const w = own(weight, WasmWeight, 'weight');
    const arena = w.slot.arena;
    arena.release(w.ptr, w.rowsPad * w.rowBytes);
    if (w.scales !== 0) arena.release(w.scales, this.scaleBytes(w.type, w.cols, w.rowsPad));
  }

  matvec(w: Weight, x: Float32Array, y: Float32Array): void {
    this.matmul(w, x, y, 1);
  }

  // x: [n, cols], y: [n, rows]; row t bit for bit matvec(w, x[t])
  matvecRows(weight: Weight, x: Float32Array, y: Float32Array, n: number): void {
    const w = own(weight, WasmWeight, 'weight');
    checkMatmul(w, x, y, n);
    matvecRowsRun(this.ctx, w, x, y, n);
  }

  // x: [n, cols], y: [n, rows]
  matmul(weight: Weight, x: Float32Array, y: Float32Array, n: number): void {
    const w = own(weight, WasmWeight, 'weight');
    checkMatmul(w, x, y, n);
    matmulRun(this.ctx, w, x, y, n);
  }

  // x: [n + rows, cols], y: [n + rows, rows of w]: n tokens of a matmul, then one-token rows
  matmulPlusRows(weight: Weight, x: Float32Array, y: Float32Array, n: number, rows: number): void {
    const w = own(weight, WasmWeight, 'weight');
    if (!(Number.isInteger(n) && n >= 0 && Number.isInteger(rows) && rows >= 0))
      throw new TandemError(
        'KERNELS_BAD_SHAPE',
        `${w.name}: token counts ${n} and ${rows} must be integers >= 0`,
        {
          hint: 'pass the matmul tokens and the one-token rows',
        },
      );
    checkMatmul(w, x, y, n + rows);
    matmulPlusRowsRun(this.ctx, w, x, y, n, rows);
  }

  // w: [2 * half, cols] (gate rows, then up rows); x: [n + rows, cols], out: [n + rows, half]
  matmulSwiglu(weight: Weight, x: Float32Array, out: Float32Array, n: number, rows = 0): void {
    matmulSwigluRun(this.ctx, own(weight, WasmWeight, 'weight'), x, out, n, rows);
  }

  embedRow(weight: Weight, row: number, out: Float32Array): void {
    const w = own(weight, WasmWeight, 'weight');
    if (!(Number.isInteger(row) && row >= 0 && row < w.rows)) {
      throw new TandemError('KERNELS_BAD_SHAPE', `${w.name}: row ${row} is outside 0..${w.rows - 1}`, {
        hint: 'pass a token id below the vocabulary size',
      });
    }
    const { arena } = w.slot;
    if (!isQ32(w.type)) {
      dequantRow(w.type, arena.u8, w.ptr + row * w.rowBytes, w.cols, out);
      return;
    }
    const u8 = arena.u8;
    const f32 = arena.f32;
    const nb = w.cols / 32;
    if (this.ctx.lanes) {
      // Q8_0: weight 4k + i of block b at (b >> 4) * 512 + 64k + 4 (b & 15) + i, + 128; Q4_0:
      // weight 8k + i (+ 4: the high nibble) at (b >> 4) * 256 + 64k + 4 (b & 15) + i, + 8
      const sc = w.scales + row * laneGroups(w.cols) * 32;
      const q8 = w.type === GgmlType.Q8_0;
      for (let b = 0; b < nb; b++) {
        const d = f16ToF32((u8[sc + 2 * b] as number) | ((u8[sc + 2 * b + 1] as number) << 8));
        const q = w.ptr + row * w.rowBytes + (b >> 4) * (q8 ? 512 : 256) + 4 * (b & 15);
        for (let i = 0; i < 32; i++) {
          const v = q8
            ? (u8[q + 64 * (i >> 2) + (i & 3)] as number) - 128
            : (((u8[q + 64 * (i >> 3) + (i & 3)] as number) >> (i & 4)) & 15) - 8;
          out[32 * b + i] = d * v;
        }
      }
      return;
    }
    if (this.ctx.grouped) {
      // row & 3 of tile row >> 2; quant k of block b: group b >> 3, lane b & 7, vector k >> 2
      // (Q4_0: (k & 15) >> 2, the high nibble from k = 16 on), byte k & 3
      const q8 = w.type === GgmlType.Q8_0;
      const gbytes = q8 ? 1024 : 512;
      const ng = groups8(w.cols);
      const q = w.ptr + (row >>> 2) * ng * gbytes + (row & 3) * (gbytes / 4);
      const sc = (w.scales >>> 2) + (row >>> 2) * ng * 32 + (row & 3) * 8;
      for (let b = 0; b < nb; b++) {
        const d = f32[sc + (b >> 3) * 32 + (b & 7)] as number;
        const at = q + (b >> 3) * gbytes + 4 * (b & 7);
        for (let k = 0; k < 32; k++) {
          const v = q8
            ? ((u8[at + 32 * (k >> 2) + (k & 3)] as number) << 24) >> 24
            : (((u8[at + 32 * ((k & 15) >> 2) + (k & 3)] as number) >> (k & 16 ? 4 : 0)) & 15) - 8;
          out[32 * b + k] = d * v;
        }
      }
      return;
    }
    const q = w.ptr + row * w.rowBytes;
    const sc = (w.scales >>> 2) + (row >>> 2) * nb * 4 + (row & 3);
    for (let b = 0; b < nb; b++) {
      const d = f32[sc + 4 * b] as number;
      if (w.type === GgmlType.Q8_0) {
        for (let i = 0; i < 32; i++) out[32 * b + i] = d * (((u8[q + 32 * b + i] as number) << 24) >> 24);
      } else {
        for (let i = 0; i < 16; i++) {
          const v = u8[q + 16 * b + i] as number;
          out[32 * b + i] = d * ((v & 0xf) - 8);
          out[32 * b + 16 + i] = d * ((v >> 4) - 8);
        }
      }
    }
  }

  rmsNorm(x: Float32Array, weight: Float32Array, eps: number, out: Float32Array, n: number): void {
    const slot = this.slots[0];
    const dim = weight.length;
    if (!this.nativeNorm || !slot || x.length < n * dim || out.length < n * dim) {
      rmsNormRef(x, weight, eps, out, n);
      return;
    }
    const arena = slot.arena;
    const xBytes = align(n * dim * 4, 64);
    const xp = arena.scratch(xBytes + align(dim * 4, 64));
    const wp = xp + xBytes;
    rowsIn(this.pool, arena, xp, x, n, dim);
    arena.f32.set(weight, wp >>> 2);
    // about 2 multiply-adds an element: a decode step's few rows stay on this thread, where
    // waking the workers for microseconds of work costs more than it saves
    this.pool.run(arena.index, op.rms_norm, [xp, wp, xp, n, dim, Math.fround(eps)], n * dim * 2);
    rowsOut(this.pool, arena, xp, dim, out, n, dim);
  }

  rope(x: Float32Array, positions: Int32Array, heads: number, params: RopeParams): void {
    ropeRun(this.ctx, this.ropeTables, x, positions, heads, params);
  }

  softmax(x: Float32Array, n: number, len: number): void {
    softmaxRef(x, n, len);
  }

  swiglu(gate: Float32Array, up: Float32Array, out: Float32Array): void {
    const slot = this.slots[0];
    const len = gate.length;
    if (!slot || up.length !== len || out.length !== len) {
      swigluRef(gate, up, out);
      return;
    }
    const arena = slot.arena;
    const bytes = align(len * 4, 64);
    const g = arena.scratch(2 * bytes);
    rowsIn(this.pool, arena, g, gate, 1, len);
    rowsIn(this.pool, arena, g + bytes, up, 1, len);
    this.pool.run(arena.index, op.swiglu, [g, g + bytes, g, len], len * 8);
    rowsOut(this.pool, arena, g, len, out, 1, len);
  }

  createKvCache(options: KvCacheOptions): KvCache {
    return createKvCacheIn((bytes) => this.slotFor(bytes), options);
  }

  kvStore(cache: KvCache, layer: number, pos0: number, k: Float32Array, v: Float32Array, n: number): void {
    kvStoreRun(cache, layer, pos0, k, v, n);
  }

  attention(cache: KvCache, q: Float32Array, out: Float32Array, p: AttentionParams): void {
    attentionRun(this.ctx, cache, q, out, p);
  }

  attentionRows(
    caches: readonly KvCache[],
    q: Float32Array,
    out: Float32Array,
    p: AttentionRowsParams,
  ): void {
    attentionRowsRun(this.ctx, caches, q, out, p);
  }

  async close(): Promise<void> {
    await this.pool.close();
    this.slots.length = 0;
  }
}

export async function createWasmKernels(
  threads: number,
  arenaBytes?: number,
  native?: NativeLib,
  smallJob?: number,
): Promise<Kernels> {
  return WasmKernels.create(threads, arenaBytes, native, smallJob);
}
