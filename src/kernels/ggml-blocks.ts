import { TandemError } from '../errors/index.js';
import { GgmlType, type GgmlTypeId, type GgmlTypeName } from './types.js';

/** Elements per block and bytes per block of each supported ggml type (ggml's type traits). */
export const blockInfo: Readonly<
  Record<GgmlTypeId, { name: GgmlTypeName; elements: number; bytes: number }>
> = {
  [GgmlType.F32]: { name: 'F32', elements: 1, bytes: 4 },
  [GgmlType.F16]: { name: 'F16', elements: 1, bytes: 2 },
  [GgmlType.BF16]: { name: 'BF16', elements: 1, bytes: 2 },
  [GgmlType.Q4_0]: { name: 'Q4_0', elements: 32, bytes: 18 },
  [GgmlType.Q8_0]: { name: 'Q8_0', elements: 32, bytes: 34 },
  [GgmlType.Q4_K]: { name: 'Q4_K', elements: 256, bytes: 144 },
  [GgmlType.Q5_K]: { name: 'Q5_K', elements: 256, bytes: 176 },
  [GgmlType.Q6_K]: { name: 'Q6_K', elements: 256, bytes: 210 },
};

export const supportedTypes: readonly GgmlTypeId[] = Object.values(GgmlType);

export function isSupportedType(type: number): type is GgmlTypeId {
  return Object.prototype.hasOwnProperty.call(blockInfo, type);
}

export function typeName(type: GgmlTypeId): GgmlTypeName {
  return blockInfo[type].name;
}

/** Bytes of one row of `cols` elements; throws if cols is not a whole number of blocks. */
export function rowBytes(type: GgmlTypeId, cols: number): number {
  const info = blockInfo[type];
  if (!isSupportedType(type)) {
    throw new TandemError(
      'KERNELS_UNSUPPORTED_TYPE',
      `ggml type ${String(type)} is not supported by the kernels`,
      {
        hint: `use one of ${supportedTypes.map((t) => typeName(t)).join(', ')}`,
      },
    );
  }
  if (cols % info.elements !== 0) {
    throw new TandemError(
      'KERNELS_BAD_SHAPE',
      `a ${info.name} row of ${cols} elements is not a whole number of ${info.elements}-element blocks`,
      {
        hint: `row widths of ${info.name} tensors must be multiples of ${info.elements}`,
        details: { type: info.name, cols },
      },
    );
  }
  return (cols / info.elements) * info.bytes;
}
