import { TandemError } from '../../errors/index.js';

/**
 * ggml tensor types as numbered in ggml.h (the numbers are what GGUF files store).
 * Only the types tandem can dequantize are in `QuantizedTypes`; the others are known so that
 * a reader can lay out a real file and name the type it cannot use.
 */
export const GgmlType = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q5_0: 6,
  Q5_1: 7,
  Q8_0: 8,
  Q8_1: 9,
  Q2_K: 10,
  Q3_K: 11,
  Q4_K: 12,
  Q5_K: 13,
  Q6_K: 14,
  Q8_K: 15,
  IQ4_NL: 20,
  IQ4_XS: 23,
  I8: 24,
  I16: 25,
  I32: 26,
  I64: 27,
  F64: 28,
  BF16: 30,
} as const;

export type GgmlTypeName = keyof typeof GgmlType;
export type GgmlTypeId = (typeof GgmlType)[GgmlTypeName];

export interface GgmlTypeInfo {
  id: GgmlTypeId;
  name: GgmlTypeName;
  /** Elements per block: a row's length must be a multiple of it. */
  blockSize: number;
  /** Bytes per block. */
  typeSize: number;
  /** Whether src/kernels/quant can quantize and dequantize it. */
  supported: boolean;
}

/** QK_K: the super-block size of the k-quants. */
export const QK_K = 256;

// [name, block size, bytes per block, supported]; sizes follow ggml's block_* structs.
const table: readonly [GgmlTypeName, number, number, boolean][] = [
  ['F32', 1, 4, true],
  ['F16', 1, 2, true],
  ['Q4_0', 32, 18, true], // f16 d; u8 qs[16]
  ['Q4_1', 32, 20, false],
  ['Q5_0', 32, 22, false],
  ['Q5_1', 32, 24, false],
  ['Q8_0', 32, 34, true], // f16 d; i8 qs[32]
  ['Q8_1', 32, 36, false],
  ['Q2_K', QK_K, 84, false],
  ['Q3_K', QK_K, 110, false],
  ['Q4_K', QK_K, 144, true], // f16 d, dmin; u8 scales[12]; u8 qs[128]
  ['Q5_K', QK_K, 176, true], // f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
  ['Q6_K', QK_K, 210, true], // u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
  ['Q8_K', QK_K, 292, false],
  ['IQ4_NL', 32, 18, false],
  ['IQ4_XS', QK_K, 136, false],
  ['I8', 1, 1, false],
  ['I16', 1, 2, false],
  ['I32', 1, 4, false],
  ['I64', 1, 8, false],
  ['F64', 1, 8, false],
  ['BF16', 1, 2, true],
];

const byId = new Map<number, GgmlTypeInfo>();
for (const [name, blockSize, typeSize, supported] of table) {
  byId.set(GgmlType[name], { id: GgmlType[name], name, blockSize, typeSize, supported });
}

/** The type's layout, or undefined for a number ggml does not define (or tandem does not know). */
export function ggmlTypeInfo(id: number): GgmlTypeInfo | undefined {
  return byId.get(id);
}

export function ggmlTypeByName(name: string): GgmlTypeInfo | undefined {
  const id = (GgmlType as Record<string, number>)[name.toUpperCase()];
  return id === undefined ? undefined : byId.get(id);
}

export function allGgmlTypes(): readonly GgmlTypeInfo[] {
  return [...byId.values()];
}

/** The layout of a type tandem can quantize and dequantize; throws a typed error otherwise. */
export function supportedType(id: number): GgmlTypeInfo {
  const info = byId.get(id);
  if (!info?.supported) {
    const supported = [...byId.values()].filter((t) => t.supported).map((t) => t.name);
    throw new TandemError(
      'INVALID_ARGUMENT',
      `ggml type ${info?.name ?? id} is not supported by tandem's quant kernels`,
      {
        hint: `use one of ${supported.join(', ')}`,
        details: { type: id },
      },
    );
  }
  return info;
}

/** Bytes of `n` elements of a type; `n` must be a multiple of the block size. */
export function byteSize(info: GgmlTypeInfo, n: number): number {
  if (n % info.blockSize !== 0) {
    throw new TandemError(
      'INVALID_ARGUMENT',
      `${n} elements is not a multiple of ${info.name}'s block size ${info.blockSize}`,
      {
        hint: `rows of ${info.name} tensors must hold a multiple of ${info.blockSize} elements`,
        details: { type: info.name, elements: n },
      },
    );
  }
  return (n / info.blockSize) * info.typeSize;
}
