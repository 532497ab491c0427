import { TandemError } from '../errors/index.js';
import { blockInfo, isSupportedType, rowBytes, supportedTypes, typeName } from './ggml-blocks.js';
import type { GgmlTypeId, WeightSource } from './types.js';

/** A validated weight slice: `rows` rows of `cols` elements, each row `rowBytes` bytes of `data`. */
export interface SlicedWeight {
  type: GgmlTypeId;
  rows: number;
  cols: number;
  name: string;
  /** Byte offset into source.data of each kept row's first kept block: row r at rowOffset(r). */
  rowOffset: (r: number) => number;
  /** Bytes of one kept row. */
  rowBytes: number;
  data: Uint8Array;
}

function bad(message: string, hint: string, details: Record<string, unknown>): TandemError {
  return new TandemError('KERNELS_BAD_SLICE', message, { hint, details });
}

/** Checks a WeightSource and resolves its slice without copying. */
export function resolveSlice(s: WeightSource): SlicedWeight {
  const name = s.name ?? 'weight';
  if (!isSupportedType(s.type)) {
    throw new TandemError(
      'KERNELS_UNSUPPORTED_TYPE',
      `${name}: ggml type ${String(s.type)} is not supported by the kernels`,
      {
        hint: `use one of ${supportedTypes.map((t) => typeName(t)).join(', ')}`,
      },
    );
  }
  const info = blockInfo[s.type];
  const fullRowBytes = rowBytes(s.type, s.cols);
  if (!Number.isInteger(s.rows) || s.rows < 1 || s.data.length < s.rows * fullRowBytes) {
    throw new TandemError(
      'KERNELS_BAD_SHAPE',
      `${name}: ${s.data.length} bytes do not hold ${s.rows} rows of ${fullRowBytes} bytes (${info.name}, ${s.cols} columns)`,
      {
        hint: 'pass the raw ggml bytes of whole rows',
        details: { rows: s.rows, cols: s.cols, bytes: s.data.length },
      },
    );
  }
  const rowStart = s.rowStart ?? 0;
  const rows = s.rowCount ?? s.rows - rowStart;
  const colStart = s.colStart ?? 0;
  const cols = s.colCount ?? s.cols - colStart;
  if (!(rowStart >= 0 && rows >= 1 && rowStart + rows <= s.rows)) {
    throw bad(
      `${name}: row slice [${rowStart}, ${rowStart + rows}) is outside 0..${s.rows}`,
      'pick a row range inside the tensor',
      { rowStart, rows },
    );
  }
  if (
    !(colStart >= 0 && cols >= 1 && colStart + cols <= s.cols) ||
    colStart % info.elements ||
    cols % info.elements
  ) {
    throw bad(
      `${name}: column slice [${colStart}, ${colStart + cols}) of ${s.cols} is outside the row or not aligned to ${info.name}'s ${info.elements}-element blocks`,
      `split columns at multiples of ${info.elements}`,
      { colStart, cols },
    );
  }
  const skip = (colStart / info.elements) * info.bytes;
  return {
    type: s.type,
    rows,
    cols,
    name,
    rowBytes: rowBytes(s.type, cols),
    rowOffset: (r: number) => (rowStart + r) * fullRowBytes + skip,
    data: s.data,
  };
}
