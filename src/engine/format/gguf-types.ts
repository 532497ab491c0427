import type { GgmlTypeInfo } from '../../kernels/quant/index.js';

/** GGUF value types as the file stores them (gguf.h). */
export const GgufValueType = {
  UINT8: 0,
  INT8: 1,
  UINT16: 2,
  INT16: 3,
  UINT32: 4,
  INT32: 5,
  FLOAT32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
  UINT64: 10,
  INT64: 11,
  FLOAT64: 12,
} as const;
export type GgufValueType = (typeof GgufValueType)[keyof typeof GgufValueType];

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
export const GGUF_DEFAULT_ALIGNMENT = 32;
/** Largest general.alignment accepted: beyond this no real file goes, and padding would dwarf tensors. */
export const GGUF_MAX_ALIGNMENT = 1 << 16;
/** GGML_MAX_DIMS. */
export const GGUF_MAX_DIMS = 4;

export const valueTypeNames: Record<number, string> = Object.fromEntries(
  Object.entries(GgufValueType).map(([k, v]) => [v, k]),
);

/** Bytes of one fixed-size value; strings and arrays have no fixed size. */
export const fixedSize: Partial<Record<number, number>> = {
  0: 1,
  1: 1,
  2: 2,
  3: 2,
  4: 4,
  5: 4,
  6: 4,
  7: 1,
  10: 8,
  11: 8,
  12: 8,
};

export type GgufNumericArray =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | Float32Array
  | BigUint64Array
  | BigInt64Array
  | Float64Array;

export interface GgufArray {
  itemType: GgufValueType;
  items: GgufNumericArray | boolean[] | string[] | GgufArray[];
}

export type GgufScalar = number | bigint | boolean | string;

export interface GgufValue {
  type: GgufValueType;
  /** u64/i64 are bigint; other numbers are number; arrays of numbers are typed arrays. */
  value: GgufScalar | GgufArray;
}

export interface GgufTensorInfo {
  name: string;
  /** ggml order, contiguous first: a row-major [out, in] matrix is [in, out]. */
  dims: number[];
  type: GgmlTypeInfo;
  /** Bytes from the start of the data section (a multiple of the alignment). */
  offset: number;
  /** Absolute byte offset in the file. */
  fileOffset: number;
  byteLength: number;
  elements: number;
  /** Rows: the product of every dim after the first. */
  rows: number;
  rowBytes: number;
}
