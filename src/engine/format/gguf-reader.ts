import { dequantize, ggmlTypeInfo, type GgmlTypeInfo } from '../../kernels/quant/index.js';
import { BufferSource, FileSource, type ByteSource } from './byte-source.js';
import { Cursor } from './cursor.js';
import { formatError, REGENERATE_HINT } from './format-error.js';
import { GgufMetadata } from './gguf-metadata.js';
import { checkTokenizer } from './gguf-tokenizer-check.js';
import {
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_MAX_ALIGNMENT,
  GGUF_MAX_DIMS,
  GgufValueType,
  fixedSize,
  valueTypeNames,
  type GgufArray,
  type GgufTensorInfo,
  type GgufValue,
} from './gguf-types.js';

/** Deepest nesting of arrays accepted: bounds recursion on a crafted file. */
const MAX_ARRAY_DEPTH = 4;
/** GGML_MAX_NAME: ggml keeps tensor names in a 64-byte field, NUL included. */
const MAX_TENSOR_NAME = 63;
const INT64_MAX = (1n << 63n) - 1n;
const UINT64_MAX = (1n << 64n) - 1n;

export interface GgufHeader {
  file: string;
  version: number;
  fileSize: number;
  metadata: GgufMetadata;
  tensors: GgufTensorInfo[];
  alignment: number;
  /** Absolute offset of the data section. */
  dataOffset: number;
}

class Parser {
  readonly c: Cursor;
  readonly file: string;
  constructor(source: ByteSource) {
    this.c = new Cursor(source);
    this.file = source.name;
  }

  fail(
    code: Parameters<typeof formatError>[0],
    field: string,
    message: string,
    details: Record<string, unknown> = {},
  ): never {
    throw formatError(code, this.file, field, message, REGENERATE_HINT, details);
  }

  /** A u64 count that must fit `count * minBytes` into what is left of the file. */
  count(field: string, minBytes: number): number {
    const n = this.c.u64(field);
    if (n * BigInt(minBytes) > BigInt(this.c.remaining)) {
      this.fail(
        'MODEL_FORMAT_BAD_COUNT',
        field,
        `count ${n} needs at least ${n * BigInt(minBytes)} bytes but only ${this.c.remaining} remain`,
        {
          count: n.toString(),
        },
      );
    }
    return Number(n);
  }

  string(field: string): string {
    const n = this.c.u64(`${field} length`);
    if (n > BigInt(this.c.remaining)) {
      this.fail(
        'MODEL_FORMAT_BAD_STRING',
        field,
        `string length ${n} runs past the end of the file (${this.c.remaining} bytes remain)`,
        {
          length: n.toString(),
        },
      );
    }
    return this.c.text(Number(n), field);
  }

  valueType(field: string): GgufValueType {
    const t = this.c.u32(`${field} type`);
    if (valueTypeNames[t] === undefined)
      this.fail('MODEL_FORMAT_BAD_VALUE_TYPE', field, `unknown value type ${t}`, { type: t });
    return t as GgufValueType;
  }

  value(type: GgufValueType, field: string, depth: number): GgufValue['value'] {
    const c = this.c;
    switch (type) {
      case GgufValueType.UINT8:
        return c.u8(field);
      case GgufValueType.INT8:
        return c.i8(field);
      case GgufValueType.UINT16:
        return c.u16(field);
      case GgufValueType.INT16:
        return c.i16(field);
      case GgufValueType.UINT32:
        return c.u32(field);
      case GgufValueType.INT32:
        return c.i32(field);
      case GgufValueType.FLOAT32:
        return c.f32(field);
      case GgufValueType.BOOL: {
        const b = c.u8(field);
        if (b > 1) this.fail('MODEL_FORMAT_BAD_METADATA', field, `bool holds ${b}, expected 0 or 1`);
        return b === 1;
      }
      case GgufValueType.STRING:
        return this.string(field);
      case GgufValueType.UINT64:
        return c.u64(field);
      case GgufValueType.INT64:
        return c.i64(field);
      case GgufValueType.FLOAT64:
        return c.f64(field);
      case GgufValueType.ARRAY:
        return this.array(field, depth + 1);
    }
  }

  array(field: string, depth: number): GgufArray {
    if (depth > MAX_ARRAY_DEPTH)
      this.fail('MODEL_FORMAT_BAD_VALUE_TYPE', field, `arrays nested deeper than ${MAX_ARRAY_DEPTH}`);
    const itemType = this.valueType(`${field} item`);
    const size = fixedSize[itemType];
    const n = this.count(`${field} count`, size ?? (itemType === GgufValueType.STRING ? 8 : 12));
    if (size !== undefined && itemType !== GgufValueType.BOOL) {
      const bytes = new Uint8Array(n * size);
      this.c.into(bytes, field);
      return { itemType, items: typedArray(itemType, bytes.buffer, n) };
    }
    const items: unknown[] = new Array(n);
    for (let i = 0; i < n; i++) items[i] = this.value(itemType, `${field}[${i}]`, depth);
    return { itemType, items: items as GgufArray['items'] };
  }
}

function typedArray(type: GgufValueType, buffer: ArrayBuffer, n: number): GgufArray['items'] {
  switch (type) {
    case GgufValueType.UINT8:
      return new Uint8Array(buffer, 0, n);
    case GgufValueType.INT8:
      return new Int8Array(buffer, 0, n);
    case GgufValueType.UINT16:
      return new Uint16Array(buffer, 0, n);
    case GgufValueType.INT16:
      return new Int16Array(buffer, 0, n);
    case GgufValueType.UINT32:
      return new Uint32Array(buffer, 0, n);
    case GgufValueType.INT32:
      return new Int32Array(buffer, 0, n);
    case GgufValueType.FLOAT32:
      return new Float32Array(buffer, 0, n);
    case GgufValueType.UINT64:
      return new BigUint64Array(buffer, 0, n);
    case GgufValueType.INT64:
      return new BigInt64Array(buffer, 0, n);
    default:
      return new Float64Array(buffer, 0, n);
  }
}

function readMetadata(p: Parser, kvCount: number): Map<string, GgufValue> {
  const entries = new Map<string, GgufValue>();
  for (let i = 0; i < kvCount; i++) {
    const key = p.string(`metadata[${i}].key`);
    if (entries.has(key)) p.fail('MODEL_FORMAT_DUPLICATE', key, `metadata key appears twice (entry ${i})`);
    const type = p.valueType(key);
    entries.set(key, { type, value: p.value(type, key, 0) });
  }
  return entries;
}

function readAlignment(p: Parser, entries: Map<string, GgufValue>): number {
  const v = entries.get('general.alignment');
  if (v === undefined) return GGUF_DEFAULT_ALIGNMENT;
  if (v.type !== GgufValueType.UINT32) {
    p.fail(
      'MODEL_FORMAT_BAD_ALIGNMENT',
      'general.alignment',
      `has type ${valueTypeNames[v.type]}, expected UINT32`,
    );
  }
  const a = v.value as number;
  if (a === 0 || (a & (a - 1)) !== 0 || a > GGUF_MAX_ALIGNMENT) {
    p.fail(
      'MODEL_FORMAT_BAD_ALIGNMENT',
      'general.alignment',
      `is ${a}; it must be a power of two from 1 to ${GGUF_MAX_ALIGNMENT}`,
      { alignment: a },
    );
  }
  return a;
}

interface RawTensor {
  name: string;
  dims: number[];
  type: GgmlTypeInfo;
  offset: bigint;
  bytes: bigint;
}

function readTensorInfo(p: Parser, i: number, alignment: number, fileSize: number): RawTensor {
  const name = p.string(`tensor[${i}].name`);
  const field = `tensor ${name}`;
  if (name.length === 0 || Buffer.byteLength(name) > MAX_TENSOR_NAME) {
    p.fail(
      'MODEL_FORMAT_BAD_STRING',
      `${field} name`,
      `tensor ${i}'s name is ${Buffer.byteLength(name)} bytes; it must be 1 to ${MAX_TENSOR_NAME}`,
    );
  }
  const nDims = p.c.u32(`${field} n_dims`);
  if (nDims < 1 || nDims > GGUF_MAX_DIMS)
    p.fail(
      'MODEL_FORMAT_BAD_DIMS',
      `${field} n_dims`,
      `has ${nDims} dimensions; expected 1 to ${GGUF_MAX_DIMS}`,
      { nDims },
    );
  const dims: bigint[] = [];
  for (let d = 0; d < nDims; d++) {
    const n = p.c.u64(`${field} dims[${d}]`);
    if (n === 0n) p.fail('MODEL_FORMAT_BAD_DIMS', `${field} dims[${d}]`, 'dimension is zero');
    dims.push(n);
  }
  const typeId = p.c.u32(`${field} type`);
  const type = ggmlTypeInfo(typeId);
  if (type === undefined)
    p.fail('MODEL_FORMAT_BAD_TENSOR_TYPE', `${field} type`, `unknown ggml type ${typeId}`, { type: typeId });
  const offset = p.c.u64(`${field} offset`);
  let elements = 1n;
  for (const n of dims) {
    elements *= n;
    if (elements > INT64_MAX)
      p.fail('MODEL_FORMAT_OVERFLOW', `${field} dims`, `element count ${dims.join('x')} overflows 63 bits`);
  }
  if ((dims[0] as bigint) % BigInt(type.blockSize) !== 0n) {
    p.fail(
      'MODEL_FORMAT_BAD_DIMS',
      `${field} dims[0]`,
      `row length ${dims[0]} is not a multiple of ${type.name}'s block size ${type.blockSize}`,
    );
  }
  const bytes = (elements / BigInt(type.blockSize)) * BigInt(type.typeSize);
  if (bytes > UINT64_MAX)
    p.fail(
      'MODEL_FORMAT_OVERFLOW',
      `${field} dims`,
      `byte size of ${dims.join('x')} ${type.name} overflows 64 bits`,
    );
  const padded = ((bytes + BigInt(alignment) - 1n) / BigInt(alignment)) * BigInt(alignment);
  if (offset + padded > UINT64_MAX)
    p.fail(
      'MODEL_FORMAT_OVERFLOW',
      `${field} offset`,
      `offset ${offset} + padded size ${padded} overflows 64 bits`,
    );
  if (bytes > BigInt(fileSize)) {
    p.fail(
      'MODEL_FORMAT_TRUNCATED',
      `${field} data`,
      `needs ${bytes} bytes (${dims.join('x')} ${type.name}) but the whole file holds ${fileSize}`,
    );
  }
  return { name, dims: dims.map(Number), type, offset, bytes };
}

/** Checks that tensor data are aligned, inside the file, disjoint and exactly where ggml's layout puts them. */
function checkLayout(
  p: Parser,
  raw: RawTensor[],
  alignment: number,
  dataOffset: number,
  fileSize: number,
): void {
  const a = BigInt(alignment);
  const dataSize = BigInt(fileSize) - BigInt(dataOffset);
  for (const t of raw) {
    const field = `tensor ${t.name} offset`;
    if (t.offset % a !== 0n)
      p.fail(
        'MODEL_FORMAT_BAD_OFFSET',
        field,
        `offset ${t.offset} is not a multiple of the alignment ${alignment}`,
      );
    if (t.offset > dataSize)
      p.fail(
        'MODEL_FORMAT_BAD_OFFSET',
        field,
        `offset ${t.offset} is past the end of the data section (${dataSize} bytes)`,
      );
    if (t.offset + t.bytes > dataSize) {
      p.fail(
        'MODEL_FORMAT_TRUNCATED',
        `tensor ${t.name} data`,
        `data [${t.offset}, ${t.offset + t.bytes}) runs past the end of the data section (${dataSize} bytes)`,
      );
    }
  }
  const sorted = [...raw].sort((x, y) => (x.offset < y.offset ? -1 : x.offset > y.offset ? 1 : 0));
  for (let i = 1; i < sorted.length; i++) {
    const prev = sorted[i - 1] as RawTensor;
    const cur = sorted[i] as RawTensor;
    if (prev.offset + prev.bytes > cur.offset) {
      p.fail(
        'MODEL_FORMAT_BAD_OFFSET',
        `tensor ${cur.name} offset`,
        `data at ${cur.offset} overlaps tensor ${prev.name} [${prev.offset}, ${prev.offset + prev.bytes})`,
      );
    }
  }
  let expected = 0n;
  for (const t of raw) {
    if (t.offset !== expected) {
      p.fail(
        'MODEL_FORMAT_BAD_OFFSET',
        `tensor ${t.name} offset`,
        `offset ${t.offset} disagrees with the layout computed from the tensors before it (${expected})`,
      );
    }
    expected += ((t.bytes + a - 1n) / a) * a;
  }
}

/** Parses and validates a GGUF v2/v3 header, reading only the header's bytes. */
export function parseGguf(source: ByteSource): GgufHeader {
  const p = new Parser(source);
  const magic = p.c.u32('magic');
  if (magic !== GGUF_MAGIC)
    p.fail(
      'MODEL_FORMAT_BAD_MAGIC',
      'magic',
      `starts with 0x${magic.toString(16).padStart(8, '0')}, not "GGUF"`,
    );
  const version = p.c.u32('version');
  if (version !== 2 && version !== 3)
    p.fail('MODEL_FORMAT_BAD_VERSION', 'version', `GGUF version ${version} is not supported (2 and 3 are)`, {
      version,
    });
  const tensorCount = p.count('tensor_count', 32);
  const kvCount = p.count('metadata_kv_count', 13);
  const entries = readMetadata(p, kvCount);
  const alignment = readAlignment(p, entries);
  const raw: RawTensor[] = [];
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const t = readTensorInfo(p, i, alignment, source.size);
    if (names.has(t.name))
      p.fail('MODEL_FORMAT_DUPLICATE', `tensor ${t.name}`, `tensor name appears twice (entry ${i})`);
    names.add(t.name);
    raw.push(t);
  }
  const dataOffset = Math.ceil(p.c.pos / alignment) * alignment;
  checkLayout(p, raw, alignment, dataOffset, source.size);
  const metadata = new GgufMetadata(entries, source.name);
  checkTokenizer(metadata, source.name);
  const tensors = raw.map((t): GgufTensorInfo => {
    const byteLength = Number(t.bytes);
    const rowBytes = ((t.dims[0] as number) / t.type.blockSize) * t.type.typeSize;
    return {
      name: t.name,
      dims: t.dims,
      type: t.type,
      offset: Number(t.offset),
      fileOffset: dataOffset + Number(t.offset),
      byteLength,
      elements: t.dims.reduce((x, y) => x * y, 1),
      rows: byteLength / rowBytes,
      rowBytes,
    };
  });
  return { file: source.name, version, fileSize: source.size, metadata, tensors, alignment, dataOffset };
}

export interface ReadTensorOptions {
  /** Rows [start, end) of the flattened outer dims (dims[1] * dims[2] * ...). */
  rows?: readonly [number, number];
  /**
   * Columns [start, end) of each row (values along dims[0]), on block boundaries: a
   * row-parallel shard (attn_output, ffn_down) reads only its part of every row.
   */
  columns?: readonly [number, number];
}

/**
 * An open GGUF file: the validated header, and reads of just the tensor bytes a caller asks
 * for (a tensor-parallel shard reads only its rows).
 */
export class GgufFile implements GgufHeader {
  readonly file: string;
  readonly version: number;
  readonly fileSize: number;
  readonly metadata: GgufMetadata;
  readonly tensors: GgufTensorInfo[];
  readonly alignment: number;
  readonly dataOffset: number;
  private readonly byName: Map<string, GgufTensorInfo>;

  private constructor(
    private readonly source: ByteSource,
    header: GgufHeader,
  ) {
    this.file = header.file;
    this.version = header.version;
    this.fileSize = header.fileSize;
    this.metadata = header.metadata;
    this.tensors = header.tensors;
    this.alignment = header.alignment;
    this.dataOffset = header.dataOffset;
    this.byName = new Map(header.tensors.map((t) => [t.name, t]));
  }

  static open(path: string): GgufFile {
    return GgufFile.fromSource(new FileSource(path));
  }

  static fromBytes(bytes: Uint8Array, name = '<buffer>'): GgufFile {
    return GgufFile.fromSource(new BufferSource(bytes, name));
  }

  static fromSource(source: ByteSource): GgufFile {
    try {
      return new GgufFile(source, parseGguf(source));
    } catch (error) {
      source.close();
      throw error;
    }
  }

  get architecture(): string {
    return this.metadata.string('general.architecture');
  }

  hasTensor(name: string): boolean {
    return this.byName.has(name);
  }

  tensor(name: string): GgufTensorInfo {
    const t = this.byName.get(name);
    if (t === undefined) {
      throw formatError(
        'MODEL_FORMAT_NOT_FOUND',
        this.file,
        `tensor ${name}`,
        'no tensor of that name in the file',
        'check the tensor name against the file (GgufFile.tensors lists them)',
      );
    }
    return t;
  }

  /** Absolute byte range of rows [start, end) of a tensor. */
  tensorRange(
    name: string,
    options: ReadTensorOptions = {},
  ): { info: GgufTensorInfo; offset: number; length: number; rows: number } {
    const info = this.tensor(name);
    const [start, end] = options.rows ?? [0, info.rows];
    if (!Number.isInteger(start) || !Number.isInteger(end) || start < 0 || end <= start || end > info.rows) {
      throw formatError(
        'MODEL_FORMAT_BAD_RANGE',
        this.file,
        `tensor ${name} rows`,
        `rows [${start}, ${end}) are outside [0, ${info.rows})`,
        'ask for a non-empty row range inside the tensor',
        {
          start,
          end,
          rows: info.rows,
        },
      );
    }
    return {
      info,
      offset: info.fileOffset + start * info.rowBytes,
      length: (end - start) * info.rowBytes,
      rows: end - start,
    };
  }

  /** Byte range of columns [start, end) within a row; the whole row without `columns`. */
  private columnBytes(
    info: GgufTensorInfo,
    columns: readonly [number, number] | undefined,
  ): { skip: number; length: number; count: number } {
    const width = info.dims[0] as number;
    if (columns === undefined) return { skip: 0, length: info.rowBytes, count: width };
    const [start, end] = columns;
    const block = info.type.blockSize;
    if (
      !Number.isInteger(start) ||
      !Number.isInteger(end) ||
      start < 0 ||
      end <= start ||
      end > width ||
      start % block !== 0 ||
      end % block !== 0
    ) {
      throw formatError(
        'MODEL_FORMAT_BAD_RANGE',
        this.file,
        `tensor ${info.name} columns`,
        `columns [${start}, ${end}) are not a block-aligned range inside [0, ${width}) (${info.type.name} blocks of ${block})`,
        `split rows at multiples of ${block}`,
        {
          start,
          end,
        },
      );
    }
    return {
      skip: (start / block) * info.type.typeSize,
      length: ((end - start) / block) * info.type.typeSize,
      count: end - start,
    };
  }

  /** The bytes before the tensor data: the header, metadata and tensor table (with padding). */
  readHeaderBytes(): Uint8Array {
    const out = new Uint8Array(this.dataOffset);
    this.source.readInto(0, this.dataOffset, out);
    return out;
  }

  /** The raw ggml bytes of a tensor, or of rows [start, end) of it, or of a column range of those rows. */
  readTensor(name: string, options: ReadTensorOptions = {}, into?: Uint8Array): Uint8Array {
    const { info, offset, length, rows } = this.tensorRange(name, options);
    const cols = this.columnBytes(info, options.columns);
    const total = options.columns === undefined ? length : rows * cols.length;
    const out = into ?? new Uint8Array(total);
    if (out.length < total) throw new RangeError(`readTensor: buffer of ${out.length} bytes for ${total}`);
    if (options.columns === undefined) this.source.readInto(offset, length, out);
    else
      for (let r = 0; r < rows; r++)
        this.source.readInto(
          offset + r * info.rowBytes + cols.skip,
          cols.length,
          out.subarray(r * cols.length),
        );
    return out.length === total ? out : out.subarray(0, total);
  }

  /** A tensor (or rows, or columns of rows, of it) dequantized to f32. */
  readTensorF32(name: string, options: ReadTensorOptions = {}): Float32Array {
    const { info, rows } = this.tensorRange(name, options);
    const bytes = this.readTensor(name, options);
    return dequantize(info.type.id, bytes, rows * this.columnBytes(info, options.columns).count);
  }

  close(): void {
    this.source.close();
  }
}
