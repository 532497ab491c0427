import { TandemError } from '../errors/index.js';
import { Arena, BASE, align } from './wasm-arena.js';
import { ThreadPool } from './pool.js';
import type { NativeLib } from './native-lib.js';
import { kernelNames, kernelsModule, op } from './wasm-module.js';
import { resolveSlice, type SlicedWeight } from './weight-source.js';
import { checkAttention, checkKvStore, checkMatmul } from './checks.js';
import { dequantRow } from './ref/quant-ref.js';
import { rmsNormRef, ropeAngles, ropeRef, softmaxRef, swigluRef } from './ref/ops-ref.js';
import {
  GEMM_TOKENS,
  GgmlType,
  type AttentionParams,
  type GgmlTypeId,
  type Kernels,
  type KvCache,
  type KvCacheOptions,
  type RopeParams,
  type Weight,
  type WeightSource,
} from './types.js';

/** Weights and caches per memory before a new one is started (a wasm32 memory holds 4 GiB). */
export const DEFAULT_ARENA_BYTES = 3 * 1024 ** 3;

type Fn = (...args: number[]) => number;

/** Rotary angles for positions 0..positions-1: [positions, ropeDim/2] each. */
interface RopeTable {
  positions: number;
  cos: Float32Array;
  sin: Float32Array;
}

/** Positions beyond this are rotated without the cached angle table. */
const ROPE_TABLE_MAX = 1 << 20;

interface ArenaSlot {
  arena: Arena;
  main: Record<string, Fn>;
}

class WasmWeight implements Weight {
  constructor(
    readonly type: GgmlTypeId,
    readonly rows: number,
    readonly cols: number,
    readonly name: string,
    readonly slot: ArenaSlot,
    /** Quants (Q8_0/Q4_0, repacked) or raw ggml rows (other types): [rowsPad, rowBytes]. */
    readonly ptr: number,
    /** Q8_0/Q4_0 scales [rowsPad/4, nb, 4] f32; 0 otherwise. */
    readonly scales: number,
    readonly rowsPad: number,
    readonly rowBytes: number,
  ) {}
}

class WasmKvCache implements KvCache {
  constructor(
    readonly options: Readonly<KvCacheOptions>,
    readonly slot: ArenaSlot,
    readonly k: number[],
    readonly v: number[],
  ) {}
}

/** Copies rows r0..r0+rows-1 of a resolved slice to `dst` in the arena, `stride` bytes apart. */
function copyRows(
  arena: Arena,
  s: SlicedWeight,
  r0: number,
  rows: number,
  dst: number,
  stride: number,
): void {
  const u8 = arena.u8;
  const first = s.rowOffset(r0);
  if (stride === s.rowBytes && (rows === 1 || s.rowOffset(r0 + 1) - first === s.rowBytes)) {
    u8.set(s.data.subarray(first, first + rows * s.rowBytes), dst);
    return;
  }
  for (let r = 0; r < rows; r++)
    u8.set(s.data.subarray(s.rowOffset(r0 + r), s.rowOffset(r0 + r) + s.rowBytes), dst + r * stride);
}

const isQ32 = (t: GgmlTypeId): boolean => t === GgmlType.Q8_0 || t === GgmlType.Q4_0;
const isK = (t: GgmlTypeId): boolean => t === GgmlType.Q4_K || t === GgmlType.Q5_K || t === GgmlType.Q6_K;

function own<T>(x: unknown, cls: new (...args: never[]) => T, what: string): T {
  if (!(x instanceof cls)) {
    throw new TandemError('KERNELS_BAD_SHAPE', `${what} was not created by this kernels instance`, {
      hint: 'use handles from the same Kernels object',
    });
  }
  return x;
}

/**
 * The WebAssembly SIMD backend: weights and KV caches live in shared memories (arenas of at
 * most `arenaBytes`), activations are copied in and results out per call, and matmul and
 * attention run on all threads of the pool.
 */
export class WasmKernels implements Kernels {
  private readonly slots: ArenaSlot[] = [];
  private readonly ropeTables = new WeakMap<RopeParams, RopeTable>();
  /** Set during matmulSwiglu: where copyOut puts the SwiGLU rows. */
  private swigluOut: Float32Array | undefined;

  private constructor(
    private readonly pool: ThreadPool,
    private readonly arenaBytes: number,
    readonly backend: 'wasm' | 'native',
    /** For 'native': the instruction set the C kernels were compiled for. */
    readonly isa: string,
    /** Q8_0 runs the native VNNI path (activations quantised once to u8, mm_q8v). */
    private readonly q8v: boolean,
    /** rmsNorm and rope run the native (bit-identical) kernels. */
    private readonly nativeNorm: boolean,
  ) {}

  get threads(): number {
    return this.pool.threads;
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
      native?.prototypes.mm_q8v !== undefined,
      native?.prototypes.rms_norm !== undefined,
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

  matvec(w: Weight, x: Float32Array, y: Float32Array): void {
    this.matmul(w, x, y, 1);
  }

  // x: [n, cols], y: [n, rows]; row t bit for bit matvec(w, x[t]): every kernel gives a token
  // matvec's bits below GEMM_TOKENS (types.ts), and Q8_0 on VNNI keeps mm_q8v at any n
  matvecRows(weight: Weight, x: Float32Array, y: Float32Array, n: number): void {
    const w = own(weight, WasmWeight, 'weight');
    checkMatmul(w, x, y, n);
    if (this.q8v && w.type === GgmlType.Q8_0) {
      this.matmulQ8v(w, x, y, n, false);
      return;
    }
    const step = GEMM_TOKENS - 1;
    for (let t = 0; t < n; t += step) {
      const m = Math.min(step, n - t);
      this.matmulChecked(
        w,
        x.subarray(t * w.cols, (t + m) * w.cols),
        y.subarray(t * w.rows, (t + m) * w.rows),
        m,
      );
    }
  }

  // x: [n, cols], y: [n, rows]
  matmul(weight: Weight, x: Float32Array, y: Float32Array, n: number): void {
    const w = own(weight, WasmWeight, 'weight');
    checkMatmul(w, x, y, n);
    this.matmulChecked(w, x, y, n);
  }

  // w: [2 * half, cols] (gate rows, then up rows); x: [n, cols], out: [n, half]
  matmulSwiglu(weight: Weight, x: Float32Array, out: Float32Array, n: number): void {
    const w = own(weight, WasmWeight, 'weight');
    const half = w.rows / 2;
    if (
      !Number.isInteger(half) ||
      !(Number.isInteger(n) && n >= 1) ||
      x.length < n * w.cols ||
      out.length < n * half
    ) {
      throw new TandemError(
        'KERNELS_BAD_SHAPE',
        `${w.name}: fused SwiGLU of [${w.rows}, ${w.cols}] for ${n} tokens got x of ${x.length} and out of ${out.length} elements`,
        {
          hint: 'stack gate and up rows (an even row count); x holds n * cols values, out n * rows / 2',
        },
      );
    }
    if (!this.nativeNorm) {
      const y = new Float32Array(n * w.rows);
      this.matmulChecked(w, x, y, n);
      for (let t = 0; t < n; t++)
        swigluRef(
          y.subarray(t * w.rows, t * w.rows + half),
          y.subarray(t * w.rows + half, (t + 1) * w.rows),
          out.subarray(t * half, (t + 1) * half),
        );
      return;
    }
    this.swigluOut = out;
    try {
      this.matmulChecked(w, x, out, n);
    } finally {
      this.swigluOut = undefined;
    }
  }

  private matmulChecked(w: WasmWeight, x: Float32Array, y: Float32Array, n: number): void {
    if (this.q8v && w.type === GgmlType.Q8_0) {
      this.matmulQ8v(w, x, y, n);
      return;
    }
    const { arena, main } = w.slot;
    const cols = w.cols;
    const groups = Math.ceil(cols / 32);
    const xfBytes = align(n * cols * 4, 64);
    const x16Bytes = align(n * cols * 2, 64);
    const xdBytes = align(n * groups * 4, 64);
    const yBytes = align(n * w.rowsPad * 4, 64);
    const ktGemm = isK(w.type) && this.q8v && n >= GEMM_TOKENS;
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
    arena.f32.set(x.subarray(0, n * cols), xf >>> 2);
    const tiles = w.rowsPad / 4;
    const work = n * w.rowsPad * cols;
    if (n > 1 && (isQ32(w.type) || isK(w.type))) {
      this.pool.run(arena.index, op.quant_part, [isQ32(w.type) ? 0 : 1, xf, n, cols, x16, xd, xs], n * cols);
    } else if (isQ32(w.type)) {
      main.quant_q8_0!(xf, n, cols, x16, xd, xs);
    } else if (isK(w.type)) {
      main.quant_q8_k!(xf, n, cols, x16, xd, xs);
    }
    if (isQ32(w.type)) {
      this.pool.run(
        arena.index,
        w.type === GgmlType.Q8_0 ? op.mm_q8_0 : op.mm_q4_0,
        [w.ptr, w.scales, cols, x16, xd, xs, n, yp, w.rowsPad, tiles],
        work,
      );
    } else if (ktGemm) {
      // K-quant GEMM (native VNNI): the q8_K activations transposed into 15-token groups
      const xt = yp + yBytes;
      this.pool.run(
        arena.index,
        op.kt_prep,
        [x16, xd, xs, n, cols, xt, xt + xtBytes, xt + xtBytes + dtBytes],
        n * cols,
      );
      this.pool.run(
        arena.index,
        op.mm_kt,
        [w.type, w.ptr, w.rowBytes, cols, xt, xt + xtBytes, xt + xtBytes + dtBytes, n, yp, w.rowsPad, tiles],
        work,
      );
    } else if (isK(w.type)) {
      this.pool.run(
        arena.index,
        op.mm_k,
        [w.type, w.ptr, w.rowBytes, cols, x16, xd, xs, n, yp, w.rowsPad, tiles],
        work,
      );
    } else {
      if (w.type !== GgmlType.F32) main.round_x!(xf, n * cols, w.type);
      this.pool.run(arena.index, op.mm_float, [w.type, w.ptr, cols, xf, n, yp, w.rowsPad, tiles], work);
    }
    this.copyOut(arena, yp, w, y, n);
  }

  /**
   * Q8_0 on the native VNNI kernels: x quantised once per call, then all rows x all tokens.
   * Few tokens: mm_q8v (each row streamed once for up to 8 tokens, each token with a lone
   * matvec's bits); from GEMM_TOKENS on, when `gemm`: mm_q8t (tokens across the vector lanes,
   * 8 rows x 15 tokens per tile).
   */
  private matmulQ8v(w: WasmWeight, x: Float32Array, y: Float32Array, n: number, gemm = true): void {
    const { arena } = w.slot;
    const cols = w.cols;
    if (n >= GEMM_TOKENS && gemm) {
      const groups = Math.ceil(n / 15);
      const xfBytes = align(n * cols * 4, 64);
      const xtBytes = align(groups * cols * 16, 64);
      const dtBytes = align(groups * (cols / 32) * 64, 64);
      const xf = arena.scratch(xfBytes + xtBytes + dtBytes + align(n * w.rowsPad * 4, 64));
      const xt = xf + xfBytes;
      const dt = xt + xtBytes;
      const yp = dt + dtBytes;
      arena.f32.set(x.subarray(0, n * cols), xf >>> 2);
      this.pool.run(arena.index, op.q8t_prep, [xf, n, cols, xt, dt], n * cols);
      this.pool.run(
        arena.index,
        op.mm_q8t,
        [w.ptr, w.scales, cols, xt, dt, n, yp, w.rowsPad, w.rowsPad / 4],
        n * w.rowsPad * cols,
      );
      this.copyOut(arena, yp, w, y, n);
      return;
    }
    const nbp = 2 * Math.ceil(cols / 64);
    const xfBytes = align(n * cols * 4, 64);
    const xuBytes = align(n * nbp * 32, 64);
    const dxBytes = align(n * nbp * 4, 64);
    const yBytes = align(n * w.rowsPad * 4, 64);
    const xf = arena.scratch(xfBytes + xuBytes + dxBytes + yBytes);
    const xu = xf + xfBytes;
    const dx = xu + xuBytes;
    const yp = dx + dxBytes;
    arena.f32.set(x.subarray(0, n * cols), xf >>> 2);
    this.pool.run(arena.index, op.q8_prep, [xf, n, cols, xu, dx], n * cols);
    this.pool.run(
      arena.index,
      op.mm_q8v,
      [w.ptr, w.scales, cols, xu, dx, n, yp, w.rowsPad, w.rowsPad / 4],
      n * w.rowsPad * cols,
    );
    this.copyOut(arena, yp, w, y, n);
  }

  /** Copies the result rows out of the arena; for matmulSwiglu first applies SwiGLU to them there. */
  private copyOut(arena: Arena, yp: number, w: WasmWeight, y: Float32Array, n: number): void {
    const f32 = arena.f32;
    const out = this.swigluOut;
    if (out) {
      const half = w.rows / 2;
      this.pool.run(arena.index, op.swiglu_rows, [yp, w.rowsPad, half, n], n * half * 8);
      for (let t = 0; t < n; t++)
        out.set(f32.subarray((yp >>> 2) + t * w.rowsPad, (yp >>> 2) + t * w.rowsPad + half), t * half);
      return;
    }
    if (w.rowsPad === w.rows || n === 1)
      y.set(f32.subarray(yp >>> 2, (yp >>> 2) + (n === 1 ? w.rows : n * w.rows)));
    else
      for (let t = 0; t < n; t++)
        y.set(f32.subarray((yp >>> 2) + t * w.rowsPad, (yp >>> 2) + t * w.rowsPad + w.rows), t * w.rows);
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
    arena.f32.set(x.subarray(0, n * dim), xp >>> 2);
    arena.f32.set(weight, wp >>> 2);
    this.pool.run(arena.index, op.rms_norm, [xp, wp, xp, n, dim, Math.fround(eps)], n * dim * 8);
    out.set(arena.f32.subarray(xp >>> 2, (xp >>> 2) + n * dim));
  }

  rope(x: Float32Array, positions: Int32Array, heads: number, params: RopeParams): void {
    const hd = params.headDim;
    const half = (params.ropeDim ?? hd) / 2;
    const neox = params.style === 'neox';
    const table = this.ropeTable(params, positions);
    if (!table) {
      ropeRef(x, positions, heads, params);
      return;
    }
    const slot = this.slots[0];
    const n = positions.length;
    if (this.nativeNorm && slot && x.length >= n * heads * hd) {
      // native twin (same products and roundings): x and each token's cos/sin row in the arena
      const arena = slot.arena;
      const xBytes = align(n * heads * hd * 4, 64);
      const xp = arena.scratch(xBytes + n * 2 * half * 4);
      const cp = (xp + xBytes) >>> 2;
      const f32 = arena.f32;
      f32.set(x.subarray(0, n * heads * hd), xp >>> 2);
      for (let t = 0; t < n; t++) {
        const at = (positions[t] as number) * half;
        f32.set(table.cos.subarray(at, at + half), cp + 2 * t * half);
        f32.set(table.sin.subarray(at, at + half), cp + (2 * t + 1) * half);
      }
      this.pool.run(
        arena.index,
        op.rope,
        [xp, xp + xBytes, n, heads, hd, half, neox ? 1 : 0],
        n * heads * half * 8,
      );
      x.set(f32.subarray(xp >>> 2, (xp >>> 2) + n * heads * hd));
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

  /**
   * cos/sin per position for one RopeParams object (the model passes the same one to every
   * layer), computed once by ropeAngles and grown as positions grow; undefined for positions
   * outside 0..ROPE_TABLE_MAX (the reference then computes them per call).
   */
  private ropeTable(params: RopeParams, positions: Int32Array): RopeTable | undefined {
    let top = 0;
    for (const p of positions) {
      if (!(p >= 0 && p < ROPE_TABLE_MAX)) return undefined;
      top = Math.max(top, p + 1);
    }
    const half = (params.ropeDim ?? params.headDim) / 2;
    let table = this.ropeTables.get(params);
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
      this.ropeTables.set(params, next);
      table = next;
    }
    return table;
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
    arena.f32.set(gate, g >>> 2);
    arena.f32.set(up, (g + bytes) >>> 2);
    this.pool.run(arena.index, op.swiglu, [g, g + bytes, g, len], len * 8);
    out.set(arena.f32.subarray(g >>> 2, (g >>> 2) + len));
  }

  createKvCache(options: KvCacheOptions): KvCache {
    if (options.headDim % 4 !== 0) {
      throw new TandemError('KERNELS_BAD_SHAPE', `head dimension ${options.headDim} is not a multiple of 4`, {
        hint: 'the WebAssembly attention kernel needs headDim % 4 == 0; use --backend reference',
      });
    }
    const es = options.type === 'f16' ? 2 : 4;
    const bytes = options.maxSeq * options.kvHeads * options.headDim * es;
    const k: number[] = [];
    const v: number[] = [];
    const slot = this.slotFor(2 * options.layers * align(bytes, 64));
    for (let l = 0; l < options.layers; l++) {
      k.push(slot.arena.alloc(bytes));
      v.push(slot.arena.alloc(bytes));
    }
    return new WasmKvCache({ ...options }, slot, k, v);
  }

  kvStore(cache: KvCache, layer: number, pos0: number, k: Float32Array, v: Float32Array, n: number): void {
    const c = own(cache, WasmKvCache, 'KV cache');
    checkKvStore(c.options, layer, pos0, k, v, n);
    const { arena, main } = c.slot;
    const row = c.options.kvHeads * c.options.headDim;
    const len = n * row;
    if (c.options.type === 'f32') {
      arena.f32.set(k.subarray(0, len), (c.k[layer]! >>> 2) + pos0 * row);
      arena.f32.set(v.subarray(0, len), (c.v[layer]! >>> 2) + pos0 * row);
      return;
    }
    const tmp = arena.scratch(len * 4);
    arena.f32.set(k.subarray(0, len), tmp >>> 2);
    main.store_f16!(tmp, c.k[layer]! + pos0 * row * 2, len);
    arena.f32.set(v.subarray(0, len), tmp >>> 2);
    main.store_f16!(tmp, c.v[layer]! + pos0 * row * 2, len);
  }

  attention(cache: KvCache, q: Float32Array, out: Float32Array, p: AttentionParams): void {
    const c = own(cache, WasmKvCache, 'KV cache');
    checkAttention(c.options, q, out, p);
    const { arena } = c.slot;
    const { kvHeads, headDim } = c.options;
    const len = p.n * p.heads * headDim;
    const stride = align((p.pos0 + p.n) * 4, 64);
    const qBytes = align(len * 4, 64);
    const base = arena.scratch(2 * qBytes + stride * this.threads);
    arena.f32.set(q.subarray(0, len), base >>> 2);
    const scale = p.scale ?? 1 / Math.sqrt(headDim);
    const half = c.options.type === 'f16' ? 1 : 0;
    this.pool.run(
      arena.index,
      op.attention,
      [
        base,
        c.k[p.layer]!,
        c.v[p.layer]!,
        base + qBytes,
        base + 2 * qBytes,
        stride,
        p.n,
        p.heads,
        kvHeads,
        headDim,
        p.pos0,
        scale,
        half,
      ],
      2 * p.n * p.heads * headDim * (p.pos0 + p.n),
    );
    out.set(arena.f32.subarray((base + qBytes) >>> 2, ((base + qBytes) >>> 2) + len));
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
