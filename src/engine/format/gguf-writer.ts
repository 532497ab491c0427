import { TandemError } from '../../errors/index.js';
import { byteSize, ggmlTypeInfo, type GgmlTypeInfo } from '../../kernels/quant/index.js';
import { writeFileAtomically } from './atomic-file.js';
import { ByteBuilder } from './byte-builder.js';
import {
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GgufValueType,
  type GgufArray,
  type GgufValue,
} from './gguf-types.js';

/** Builders for metadata values, so callers state each key's GGUF type explicitly. */
export const gv = {
  u8: (v: number): GgufValue => ({ type: GgufValueType.UINT8, value: v }),
  i32: (v: number): GgufValue => ({ type: GgufValueType.INT32, value: v }),
  u32: (v: number): GgufValue => ({ type: GgufValueType.UINT32, value: v }),
  u64: (v: number | bigint): GgufValue => ({ type: GgufValueType.UINT64, value: BigInt(v) }),
  f32: (v: number): GgufValue => ({ type: GgufValueType.FLOAT32, value: v }),
  bool: (v: boolean): GgufValue => ({ type: GgufValueType.BOOL, value: v }),
  str: (v: string): GgufValue => ({ type: GgufValueType.STRING, value: v }),
  strings: (v: string[]): GgufValue => ({
    type: GgufValueType.ARRAY,
    value: { itemType: GgufValueType.STRING, items: v },
  }),
  f32s: (v: Float32Array | number[]): GgufValue => ({
    type: GgufValueType.ARRAY,
    value: { itemType: GgufValueType.FLOAT32, items: Float32Array.from(v) },
  }),
  i32s: (v: Int32Array | number[]): GgufValue => ({
    type: GgufValueType.ARRAY,
    value: { itemType: GgufValueType.INT32, items: Int32Array.from(v) },
  }),
};

export function encodeValue(out: ByteBuilder, type: GgufValueType, value: GgufValue['value']): void {
  switch (type) {
    case GgufValueType.UINT8:
      out.u8(value as number);
      break;
    case GgufValueType.INT8:
      out.i8(value as number);
      break;
    case GgufValueType.UINT16:
      out.u16(value as number);
      break;
    case GgufValueType.INT16:
      out.i16(value as number);
      break;
    case GgufValueType.UINT32:
      out.u32(value as number);
      break;
    case GgufValueType.INT32:
      out.i32(value as number);
      break;
    case GgufValueType.FLOAT32:
      out.f32(value as number);
      break;
    case GgufValueType.BOOL:
      out.u8(value ? 1 : 0);
      break;
    case GgufValueType.STRING:
      out.str(value as string);
      break;
    case GgufValueType.UINT64:
      out.u64(value as bigint);
      break;
    case GgufValueType.INT64:
      out.i64(value as bigint);
      break;
    case GgufValueType.FLOAT64:
      out.f64(value as number);
      break;
    case GgufValueType.ARRAY: {
      const arr = value as GgufArray;
      out.u32(arr.itemType).u64(arr.items.length);
      const items = arr.items as ArrayLike<GgufValue['value']>;
      for (let i = 0; i < items.length; i++) encodeValue(out, arr.itemType, items[i] as GgufValue['value']);
      break;
    }
  }
}

export interface TensorSpec {
  name: string;
  /** ggml order, contiguous first. */
  dims: number[];
  type: number;
}

export interface TensorLayout extends TensorSpec {
  info: GgmlTypeInfo;
  offset: number;
  byteLength: number;
}

/** Offsets of each tensor in the data section: in order, each padded to the alignment (as ggml computes them). */
export function layoutTensors(
  tensors: readonly TensorSpec[],
  alignment = GGUF_DEFAULT_ALIGNMENT,
): TensorLayout[] {
  let offset = 0;
  return tensors.map((t) => {
    const info = ggmlTypeInfo(t.type);
    if (info === undefined) {
      throw new TandemError('MODEL_FORMAT_UNSUPPORTED', `tensor ${t.name}: unknown ggml type ${t.type}`, {
        hint: 'use a type from src/kernels/quant',
      });
    }
    const byteLength = byteSize(
      info,
      t.dims.reduce((a, b) => a * b, 1),
    );
    const layout = { ...t, info, offset, byteLength };
    offset += Math.ceil(byteLength / alignment) * alignment;
    return layout;
  });
}

/** The whole header, padded so the data section starts right after it. */
export function encodeHeader(
  metadata: ReadonlyMap<string, GgufValue>,
  layout: readonly TensorLayout[],
  alignment = GGUF_DEFAULT_ALIGNMENT,
  version = 3,
): Uint8Array {
  const out = new ByteBuilder();
  out.u32(GGUF_MAGIC).u32(version).u64(layout.length).u64(metadata.size);
  for (const [key, v] of metadata) {
    out.str(key).u32(v.type);
    encodeValue(out, v.type, v.value);
  }
  for (const t of layout) {
    out.str(t.name).u32(t.dims.length);
    for (const d of t.dims) out.u64(d);
    out.u32(t.type).u64(t.offset);
  }
  out.pad(alignment);
  return out.finish();
}

/** Tensor data in order: whole, or as several chunks that add up to the tensor's bytes. */
export type TensorData = Uint8Array | Iterable<Uint8Array> | AsyncIterable<Uint8Array>;

export interface WriteGgufOptions {
  alignment?: number;
  /** Called after each tensor with the bytes written so far and the total. */
  onProgress?: (written: number, total: number, tensor: string) => void;
}

/**
 * Streams a GGUF v3 file: header first, then each tensor's bytes as `data(tensor)` produces
 * them, so no more than one tensor (or one chunk of it) is in memory at a time. Writes through
 * a temporary file renamed on success, so `path` is never left truncated (writeFileAtomically).
 */
export async function writeGguf(
  path: string,
  metadata: ReadonlyMap<string, GgufValue>,
  tensors: readonly TensorSpec[],
  data: (tensor: TensorLayout, index: number) => TensorData | Promise<TensorData>,
  options: WriteGgufOptions = {},
): Promise<{ bytes: number }> {
  const alignment = options.alignment ?? GGUF_DEFAULT_ALIGNMENT;
  if (!metadata.has('general.alignment') && alignment !== GGUF_DEFAULT_ALIGNMENT) {
    throw new TandemError(
      'INVALID_ARGUMENT',
      `alignment ${alignment} needs general.alignment in the metadata`,
      { hint: "add gv.u32(alignment) as 'general.alignment'" },
    );
  }
  const layout = layoutTensors(tensors, alignment);
  const header = encodeHeader(metadata, layout, alignment);
  const last = layout[layout.length - 1];
  const total = header.length + (last ? last.offset + Math.ceil(last.byteLength / alignment) * alignment : 0);
  return writeFileAtomically(path, async (file, signal) => {
    let pos = 0;
    const write = async (b: Uint8Array): Promise<void> => {
      signal.throwIfAborted();
      let done = 0;
      while (done < b.length) done += (await file.write(b, done, b.length - done, pos + done)).bytesWritten;
      pos += b.length;
    };
    await write(header);
    for (let i = 0; i < layout.length; i++) {
      const t = layout[i] as TensorLayout;
      const start = pos;
      const produced = await data(t, i);
      const chunks = produced instanceof Uint8Array ? [produced] : produced;
      for await (const chunk of chunks) await write(chunk);
      if (pos - start !== t.byteLength) {
        throw new TandemError(
          'INTERNAL',
          `tensor ${t.name}: produced ${pos - start} bytes, its layout needs ${t.byteLength}`,
          { hint: 'this is a bug in the caller of writeGguf' },
        );
      }
      await write(new Uint8Array(Math.ceil(t.byteLength / alignment) * alignment - t.byteLength));
      options.onProgress?.(pos, total, t.name);
    }
    return { bytes: pos };
  });
}

/** The same file in memory (tests and small fixtures). */
export function encodeGguf(
  metadata: ReadonlyMap<string, GgufValue>,
  tensors: readonly TensorSpec[],
  data: readonly Uint8Array[],
  alignment = GGUF_DEFAULT_ALIGNMENT,
): Uint8Array {
  const layout = layoutTensors(tensors, alignment);
  const out = new ByteBuilder().bytes(encodeHeader(metadata, layout, alignment));
  layout.forEach((t, i) => {
    const d = data[i] as Uint8Array;
    if (d.length !== t.byteLength)
      throw new TandemError('INTERNAL', `tensor ${t.name}: ${d.length} bytes for ${t.byteLength}`, {
        hint: "pass each tensor's full bytes",
      });
    out.bytes(d);
    out.pad(alignment);
  });
  return out.finish();
}
