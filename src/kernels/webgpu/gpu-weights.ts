import { TandemError } from '../../errors/index.js';
import { typeName } from '../ggml-blocks.js';
import { f16ToF32 } from '../half.js';
import { kQuants, scaleMinK4 } from '../ref/quant-ref.js';
import { GgmlType, type GgmlTypeId, type Weight, type WeightSource } from '../types.js';
import { resolveSlice, type SlicedWeight } from '../weight-source.js';
import type { GpuDevice } from './gpu-device.js';

/**
 * Weights in GPU memory. A weight is cut into chunks of whole rows, each one storage buffer
 * no larger than the adapter's largest binding and with at most maxComputeWorkgroupsPerDimension
 * rows (one workgroup per row). Per chunk, the layout the WGSL matmuls read (wgsl-matmul.ts):
 *
 * - F32: [rows, cols] f32.  F16: [rows, cols] f16 (u32 pairs; cols even).
 * - Q8_0: quants [rows, cols] i8 (4 to a word), then scales [rows, cols / 32] f32.
 * - Q4_0: ggml's nibble bytes [rows, cols / 2], then scales [rows, cols / 32] f32.
 * - Q4_K, Q5_K, Q6_K: per 256-element super-block 70 words: quants as i8, 16 sub-block
 *   scale (and min) bytes, d and dmin as f32 (1.3-1.9x ggml's bytes: simple to read, not
 *   yet the bandwidth-lean layout).
 *
 * Scales are widened from f16 to f32 on upload so the kernels read whole words.
 */

/** The weight types the WGSL matmuls read. */
export const gpuTypes: readonly GgmlTypeId[] = [
  GgmlType.F32,
  GgmlType.F16,
  GgmlType.Q8_0,
  GgmlType.Q4_0,
  GgmlType.Q4_K,
  GgmlType.Q5_K,
  GgmlType.Q6_K,
];

/** The K-quants, repacked into one layout of 70 words per 256 elements (wgsl-matmul.ts). */
export const isKQuant = (type: number): boolean =>
  type === GgmlType.Q4_K || type === GgmlType.Q5_K || type === GgmlType.Q6_K;

export interface GpuChunk {
  buffer: GPUBuffer;
  /** First row of the weight this chunk holds. */
  rowStart: number;
  rows: number;
  /** Word offset of the scales in `buffer` (quantised types; 0 otherwise). */
  scales: number;
}

export interface GpuWeight extends Weight {
  readonly chunks: readonly GpuChunk[];
  readonly bytes: number;
}

/** GPU bytes of one row of `type` (quants or values, plus widened scales). */
export function gpuRowBytes(type: GgmlTypeId, cols: number): number {
  switch (type) {
    case GgmlType.F32:
      return 4 * cols;
    case GgmlType.F16:
      return 2 * cols;
    case GgmlType.Q8_0:
      return cols + cols / 8;
    case GgmlType.Q4_0:
      return cols / 2 + cols / 8;
    case GgmlType.Q4_K:
    case GgmlType.Q5_K:
    case GgmlType.Q6_K:
      return (cols / 256) * 280;
    default:
      throw unsupported(type, 'weight');
  }
}

function unsupported(type: GgmlTypeId, name: string): TandemError {
  return new TandemError(
    'KERNELS_UNSUPPORTED_TYPE',
    `${name}: the WebGPU kernels do not multiply ${typeName(type)} weights yet (they read ${gpuTypes.map((t) => typeName(t)).join(', ')})`,
    { hint: 'use a model quantised to one of those, or --kernels native/wasm', details: { type } },
  );
}

/** Rows per chunk: as many as fit one binding and one dispatch dimension. */
export function chunkRows(device: GpuDevice, type: GgmlTypeId, cols: number, name: string): number {
  const perRow = gpuRowBytes(type, cols);
  const rows = Math.min(
    Math.floor(device.maxBinding / perRow),
    device.limits.maxComputeWorkgroupsPerDimension,
  );
  if (rows < 1) {
    throw new TandemError(
      'KERNELS_DEVICE_LIMIT',
      `${name}: one row of ${cols} ${typeName(type)} elements (${perRow} bytes) exceeds the adapter's largest storage binding (maxStorageBufferBindingSize ${device.limits.maxStorageBufferBindingSize}, maxBufferSize ${device.limits.maxBufferSize})`,
      { hint: 'use --kernels native/wasm for this model', details: { cols, perRow } },
    );
  }
  return rows;
}

/** Copies (repacking quantised rows) a weight into GPU memory. */
export function uploadGpuWeight(device: GpuDevice, source: WeightSource): GpuWeight {
  const s = resolveSlice(source);
  if (!gpuTypes.includes(s.type)) throw unsupported(s.type, s.name);
  if (s.type === GgmlType.F16 && s.cols % 2) {
    throw new TandemError(
      'KERNELS_BAD_SHAPE',
      `${s.name}: F16 rows of odd width ${s.cols} are not supported on WebGPU`,
      {
        hint: 'use --kernels native/wasm for this model',
      },
    );
  }
  const per = chunkRows(device, s.type, s.cols, s.name);
  const chunks: GpuChunk[] = [];
  for (let r0 = 0; r0 < s.rows; r0 += per) {
    const rows = Math.min(per, s.rows - r0);
    const { bytes, scales } = packRows(s, r0, rows);
    chunks.push({
      buffer: device.upload(bytes, `${s.name}[${r0}..${r0 + rows})`),
      rowStart: r0,
      rows,
      scales,
    });
  }
  return {
    type: s.type,
    rows: s.rows,
    cols: s.cols,
    name: s.name,
    chunks,
    bytes: s.rows * gpuRowBytes(s.type, s.cols),
  };
}

/** Rows [r0, r0 + rows) of a slice in the GPU layout; `scales` is the scales' word offset. */
function packRows(s: SlicedWeight, r0: number, rows: number): { bytes: Uint8Array; scales: number } {
  const out = new Uint8Array(rows * gpuRowBytes(s.type, s.cols));
  if (s.type === GgmlType.F32 || s.type === GgmlType.F16) {
    for (let r = 0; r < rows; r++) {
      const o = s.rowOffset(r0 + r);
      out.set(s.data.subarray(o, o + s.rowBytes), r * s.rowBytes);
    }
    return { bytes: out, scales: 0 };
  }
  if (isKQuant(s.type)) return { bytes: packKRows(s, r0, rows, out), scales: 0 };
  const eight = s.type === GgmlType.Q8_0;
  const blockBytes = eight ? 34 : 18;
  const quantBytes = eight ? 32 : 16;
  const nb = s.cols / 32;
  const scaleStart = rows * nb * quantBytes;
  const scales = new Float32Array(out.buffer, scaleStart, rows * nb);
  const view = new DataView(s.data.buffer, s.data.byteOffset, s.data.byteLength);
  for (let r = 0; r < rows; r++) {
    const o = s.rowOffset(r0 + r);
    for (let b = 0; b < nb; b++) {
      const bo = o + b * blockBytes;
      scales[r * nb + b] = f16ToF32(view.getUint16(bo, true));
      out.set(s.data.subarray(bo + 2, bo + blockBytes), (r * nb + b) * quantBytes);
    }
  }
  return { bytes: out, scales: scaleStart / 4 };
}

/** K-quant rows [r0, r0 + rows) into `out`, 280 bytes per super-block (see the layout above). */
function packKRows(s: SlicedWeight, r0: number, rows: number, out: Uint8Array): Uint8Array {
  const six = s.type === GgmlType.Q6_K;
  const blockBytes = six ? 210 : s.type === GgmlType.Q5_K ? 176 : 144;
  const nb = s.cols / 256;
  const q = new Int32Array(256);
  const view = new DataView(out.buffer);
  const b = s.data;
  for (let r = 0; r < rows; r++) {
    for (let k = 0; k < nb; k++) {
      const bo = s.rowOffset(r0 + r) + k * blockBytes;
      const o = (r * nb + k) * 280;
      kQuants(s.type, b, bo, q);
      for (let i = 0; i < 256; i++) view.setInt8(o + i, q[i] as number);
      if (six) {
        out.set(b.subarray(bo + 192, bo + 208), o + 256);
        view.setFloat32(o + 272, f16ToF32((b[bo + 208] as number) | ((b[bo + 209] as number) << 8)), true);
        view.setFloat32(o + 276, 0, true);
      } else {
        for (let j = 0; j < 8; j++) {
          const [sc, m] = scaleMinK4(b, bo + 4, j);
          out[o + 256 + j] = sc;
          out[o + 264 + j] = m;
        }
        view.setFloat32(o + 272, f16ToF32((b[bo] as number) | ((b[bo + 1] as number) << 8)), true);
        view.setFloat32(o + 276, f16ToF32((b[bo + 2] as number) | ((b[bo + 3] as number) << 8)), true);
      }
    }
  }
  return out;
}

/** Releases a weight's buffers. */
export function destroyGpuWeight(w: GpuWeight): void {
  for (const c of w.chunks) c.buffer.destroy();
}
