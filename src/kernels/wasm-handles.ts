import { TandemError } from '../errors/index.js';
import type { Arena } from './wasm-arena.js';
import type { ThreadPool } from './pool.js';
import type { SlicedWeight } from './weight-source.js';
import { GgmlType, type GgmlTypeId, type KvCache, type KvCacheOptions, type Weight } from './types.js';

export type Fn = (...args: number[]) => number;

/** One WebAssembly memory and the calling thread's instance of the kernels on it. */
export interface ArenaSlot {
  arena: Arena;
  main: Record<string, Fn>;
}

/** What the wasm/native kernels' parts share: the pool, the arenas and the native paths on offer. */
export interface WasmContext {
  readonly pool: ThreadPool;
  /** Arenas in creation order; the first is where activation-only kernels run. */
  readonly slots: readonly ArenaSlot[];
  /** K-quant prefill runs the native GEMM on transposed q8_K activations (mm_kt): AVX-512 VNNI and NEON builds. */
  readonly kt: boolean;
  /** Q8_0 / Q4_0 run the native tile-layout kernels on prepared activations (mm_q8v, mm_q4v, ...): NEON builds. */
  readonly tile: boolean;
  /** Q8_0 / Q4_0 are held in the lanes layouts (laneGroups) and run mm_q8l / mm_q4l and their GEMMs: AVX-512 VNNI builds. */
  readonly lanes: boolean;
  /** Q8_0 / Q4_0 are held in the grouped layout (groupedTileBytes) and run mm_q8g / mm_q4g: AVX2 builds without AVX-512. */
  readonly grouped: boolean;
  /** rmsNorm, rope, SwiGLU rows and attention rows run the native kernels (opsPrototypes in native-lib.ts). */
  readonly nativeNorm: boolean;
  /** K-quants run the native q8_K kernels (kv_prep, mm_kv: AVX-512 or AVX2 builds). */
  readonly kv: boolean;
}

export class WasmWeight implements Weight {
  constructor(
    readonly type: GgmlTypeId,
    readonly rows: number,
    readonly cols: number,
    readonly name: string,
    readonly slot: ArenaSlot,
    /**
     * Quants (Q8_0/Q4_0, repacked) or raw ggml rows (other types): [rowsPad, rowBytes]; Q8_0
     * and Q4_0 in the lanes layouts (laneGroups) where ctx.lanes, in the grouped layout
     * (groupedTileBytes: [rowsPad / 4] tiles) where ctx.grouped.
     */
    readonly ptr: number,
    /**
     * Q8_0/Q4_0 scales [rowsPad/4, nb, 4] f32 (lanes layout: [rowsPad, laneGroups * 16] f16;
     * grouped: [rowsPad / 4, groups8, 4, 8] f32); 0 otherwise.
     */
    readonly scales: number,
    readonly rowsPad: number,
    readonly rowBytes: number,
  ) {}
}

export class WasmKvCache implements KvCache {
  constructor(
    readonly options: Readonly<KvCacheOptions>,
    readonly slot: ArenaSlot,
    readonly k: number[],
    readonly v: number[],
  ) {}
}

/** Copies rows r0..r0+rows-1 of a resolved slice to `dst` in the arena, `stride` bytes apart. */
export function copyRows(
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

/**
 * The lanes layouts of the native VNNI path (tk_repack_q8l in gemm-vnni.c, tk_repack_q4l in
 * q4-vnni.c): each row is re-laid once at upload as groups of 16 blocks, so that one 64-byte
 * load holds 4 weights (Q8_0: [8][16 blocks][4] u8, weight + 128; 512 bytes) or 8 weights
 * (Q4_0: [4][16 blocks][4] u8, two nibbles of weight + 8; 256 bytes) of each of the 16 blocks,
 * with the f16 block scales apart ([rowsPad, groups * 16]); blocks past the row's end are
 * padding (weight 0, scale 0). Groups per row.
 */
export const laneGroups = (cols: number): number => Math.ceil(cols / 512);

/** Bytes of one row's quants in the lanes layout of `type` (Q8_0 or Q4_0). */
export const laneRowBytes = (type: GgmlTypeId, cols: number): number =>
  laneGroups(cols) * (type === GgmlType.Q8_0 ? 512 : 256);

/**
 * The grouped layout of AVX2 builds (gemm-avx2.c): each 4-row tile re-laid once at upload as
 * groups of 8 blocks (256 columns), so that one 32-byte load holds 4 quants of each of the 8
 * blocks: per group, Q8_0 [4 rows][8 j][8 blocks][4] i8 (1024 bytes), quant 4j + c of each
 * block; Q4_0 [4 rows][4 j][8 blocks][4] u8 (512 bytes), byte 4j + c of each block's 16 ggml
 * bytes (low nibble: quant 4j + c, high: quant 16 + 4j + c, each + 8). Scales apart, f32
 * [tiles][groups][4 rows][8 blocks]. Blocks past the row's end and rows past the weight's are
 * zeros with zero scales. Groups per row:
 */
export const groups8 = (cols: number): number => Math.ceil(cols / 256);

/** Bytes of one 4-row tile's quants in the grouped layout of `type` (Q8_0 or Q4_0). */
export const groupedTileBytes = (type: GgmlTypeId, cols: number): number =>
  groups8(cols) * (type === GgmlType.Q8_0 ? 1024 : 512);

export const isQ32 = (t: GgmlTypeId): boolean => t === GgmlType.Q8_0 || t === GgmlType.Q4_0;
export const isK = (t: GgmlTypeId): boolean =>
  t === GgmlType.Q4_K || t === GgmlType.Q5_K || t === GgmlType.Q6_K;

/** x as an instance of `cls`; throws when it came from another kernels object. */
export function own<T>(x: unknown, cls: new (...args: never[]) => T, what: string): T {
  if (!(x instanceof cls)) {
    throw new TandemError('KERNELS_BAD_SHAPE', `${what} was not created by this kernels instance`, {
      hint: 'use handles from the same Kernels object',
    });
  }
  return x;
}
