import { bf16ToF32, f16Table } from '../../kernels/quant/index.js';
import { BufferSource, FileSource, type ByteSource } from './byte-source.js';
import { formatError, REGENERATE_HINT } from './format-error.js';

/** Largest JSON header accepted (the reference implementation's limit). */
export const SAFETENSORS_MAX_HEADER = 100_000_000;

/** Bytes per element of each safetensors dtype; tandem computes with F32, F16 and BF16. */
export const safetensorsDtypes: Readonly<Record<string, number>> = {
  F64: 8,
  F32: 4,
  F16: 2,
  BF16: 2,
  I64: 8,
  I32: 4,
  I16: 2,
  I8: 1,
  U64: 8,
  U32: 4,
  U16: 2,
  U8: 1,
  BOOL: 1,
  F8_E4M3: 1,
  F8_E5M2: 1,
};
const COMPUTE_DTYPES = ['F32', 'F16', 'BF16'];

export interface SafetensorsTensorInfo {
  name: string;
  dtype: string;
  /** Row-major (PyTorch order): a linear layer's weight is [out, in]. */
  shape: number[];
  /** Absolute byte offset in the file. */
  fileOffset: number;
  byteLength: number;
  /** Product of every dim but the last (1 for scalars and vectors). */
  rows: number;
  rowBytes: number;
}

export interface SafetensorsHeader {
  file: string;
  metadata: Record<string, string>;
  tensors: SafetensorsTensorInfo[];
  dataOffset: number;
}

function fail(file: string, code: Parameters<typeof formatError>[0], field: string, message: string): never {
  throw formatError(code, file, field, message, REGENERATE_HINT);
}

function readHeaderJson(source: ByteSource): { json: unknown; dataOffset: number } {
  const file = source.name;
  if (source.size < 8)
    fail(
      file,
      'MODEL_FORMAT_TRUNCATED',
      'header_length',
      `the file has ${source.size} bytes, fewer than the 8-byte header length`,
    );
  const lenBytes = new Uint8Array(8);
  source.readInto(0, 8, lenBytes);
  const n = new DataView(lenBytes.buffer).getBigUint64(0, true);
  if (n > BigInt(SAFETENSORS_MAX_HEADER))
    fail(
      file,
      'MODEL_FORMAT_BAD_HEADER',
      'header_length',
      `header of ${n} bytes is over the ${SAFETENSORS_MAX_HEADER}-byte limit`,
    );
  if (n > BigInt(source.size - 8))
    fail(
      file,
      'MODEL_FORMAT_BAD_HEADER',
      'header_length',
      `header of ${n} bytes runs past the end of the file (${source.size} bytes)`,
    );
  const len = Number(n);
  const bytes = new Uint8Array(len);
  source.readInto(8, len, bytes);
  if (bytes[0] !== 0x7b)
    fail(file, 'MODEL_FORMAT_BAD_HEADER', 'header', 'the JSON header does not start with "{"');
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch (error) {
    fail(
      file,
      'MODEL_FORMAT_BAD_HEADER',
      'header',
      `the header is not valid UTF-8 JSON (${(error as Error).message})`,
    );
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json))
    fail(file, 'MODEL_FORMAT_BAD_HEADER', 'header', 'the header is not a JSON object');
  return { json, dataOffset: 8 + len };
}

interface Entry {
  name: string;
  dtype: string;
  shape: number[];
  begin: number;
  end: number;
}

function parseEntry(file: string, name: string, value: unknown): Entry {
  const field = `tensor ${name}`;
  if (typeof value !== 'object' || value === null)
    fail(file, 'MODEL_FORMAT_BAD_HEADER', field, 'entry is not an object');
  const { dtype, shape, data_offsets: offsets } = value as Record<string, unknown>;
  if (typeof dtype !== 'string' || safetensorsDtypes[dtype] === undefined) {
    fail(file, 'MODEL_FORMAT_BAD_TENSOR_TYPE', `${field} dtype`, `unknown dtype ${JSON.stringify(dtype)}`);
  }
  if (!Array.isArray(shape) || shape.length > 8 || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    fail(
      file,
      'MODEL_FORMAT_BAD_DIMS',
      `${field} shape`,
      `shape ${JSON.stringify(shape)} is not a list of up to 8 non-negative integers`,
    );
  }
  if (
    !Array.isArray(offsets) ||
    offsets.length !== 2 ||
    !offsets.every((o) => Number.isSafeInteger(o) && o >= 0)
  ) {
    fail(
      file,
      'MODEL_FORMAT_BAD_OFFSET',
      `${field} data_offsets`,
      `data_offsets ${JSON.stringify(offsets)} is not a pair of non-negative integers`,
    );
  }
  const [begin, end] = offsets as [number, number];
  if (end < begin)
    fail(
      file,
      'MODEL_FORMAT_BAD_OFFSET',
      `${field} data_offsets`,
      `data_offsets [${begin}, ${end}] are reversed`,
    );
  const elements = (shape as number[]).reduce((a, d) => a * BigInt(d), 1n);
  const bytes = elements * BigInt(safetensorsDtypes[dtype] as number);
  if (bytes !== BigInt(end - begin)) {
    fail(
      file,
      'MODEL_FORMAT_BAD_DIMS',
      `${field} shape`,
      `shape [${(shape as number[]).join(', ')}] x ${dtype} is ${bytes} bytes but data_offsets span ${end - begin}`,
    );
  }
  return { name, dtype, shape: shape as number[], begin, end };
}

/** Parses and validates a safetensors header: offsets must tile the data buffer exactly (no holes, no overlap). */
export function parseSafetensors(source: ByteSource): SafetensorsHeader {
  const file = source.name;
  const { json, dataOffset } = readHeaderJson(source);
  let metadata: Record<string, string> = {};
  const entries: Entry[] = [];
  for (const [name, value] of Object.entries(json as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (
        typeof value !== 'object' ||
        value === null ||
        !Object.values(value).every((v) => typeof v === 'string')
      ) {
        fail(file, 'MODEL_FORMAT_BAD_HEADER', '__metadata__', 'is not an object of strings');
      }
      metadata = value as Record<string, string>;
      continue;
    }
    entries.push(parseEntry(file, name, value));
  }
  const sorted = [...entries].sort((a, b) => a.begin - b.begin || a.end - b.end);
  let expected = 0;
  let prev: Entry | undefined;
  for (const e of sorted) {
    if (e.begin < expected)
      fail(
        file,
        'MODEL_FORMAT_BAD_OFFSET',
        `tensor ${e.name} data_offsets`,
        `[${e.begin}, ${e.end}] overlaps tensor ${prev?.name} ending at ${expected}`,
      );
    if (e.begin > expected)
      fail(
        file,
        'MODEL_FORMAT_BAD_OFFSET',
        `tensor ${e.name} data_offsets`,
        `[${e.begin}, ${e.end}] leaves a hole after byte ${expected}`,
      );
    expected = e.end;
    prev = e;
  }
  if (dataOffset + expected > source.size) {
    fail(
      file,
      'MODEL_FORMAT_TRUNCATED',
      `tensor ${prev?.name} data`,
      `data ends at byte ${dataOffset + expected} but the file has ${source.size}`,
    );
  }
  const tensors = entries.map((e): SafetensorsTensorInfo => {
    const last = e.shape.length ? (e.shape[e.shape.length - 1] as number) : 1;
    const rows = e.shape.slice(0, -1).reduce((a, b) => a * b, 1);
    return {
      name: e.name,
      dtype: e.dtype,
      shape: e.shape,
      fileOffset: dataOffset + e.begin,
      byteLength: e.end - e.begin,
      rows,
      rowBytes: last * (safetensorsDtypes[e.dtype] as number),
    };
  });
  return { file, metadata, tensors, dataOffset };
}

/** An open safetensors file; reads only the tensors (or rows) asked for. */
export class SafetensorsFile implements SafetensorsHeader {
  readonly file: string;
  readonly metadata: Record<string, string>;
  readonly tensors: SafetensorsTensorInfo[];
  readonly dataOffset: number;
  private readonly byName: Map<string, SafetensorsTensorInfo>;

  private constructor(
    private readonly source: ByteSource,
    header: SafetensorsHeader,
  ) {
    this.file = header.file;
    this.metadata = header.metadata;
    this.tensors = header.tensors;
    this.dataOffset = header.dataOffset;
    this.byName = new Map(header.tensors.map((t) => [t.name, t]));
  }

  static open(path: string): SafetensorsFile {
    return SafetensorsFile.fromSource(new FileSource(path));
  }
  static fromBytes(bytes: Uint8Array, name = '<buffer>'): SafetensorsFile {
    return SafetensorsFile.fromSource(new BufferSource(bytes, name));
  }
  static fromSource(source: ByteSource): SafetensorsFile {
    try {
      return new SafetensorsFile(source, parseSafetensors(source));
    } catch (error) {
      source.close();
      throw error;
    }
  }

  tensor(name: string): SafetensorsTensorInfo {
    const t = this.byName.get(name);
    if (t === undefined)
      fail(this.file, 'MODEL_FORMAT_NOT_FOUND', `tensor ${name}`, 'no tensor of that name in the file');
    return t;
  }

  /** Raw bytes of a tensor, or of rows [start, end) of it (rows = every dim but the last). */
  readTensor(name: string, options: { rows?: readonly [number, number] } = {}): Uint8Array {
    const t = this.tensor(name);
    const [start, end] = options.rows ?? [0, t.rows];
    if (!Number.isInteger(start) || !Number.isInteger(end) || start < 0 || end < start || end > t.rows) {
      fail(
        this.file,
        'MODEL_FORMAT_BAD_RANGE',
        `tensor ${name} rows`,
        `rows [${start}, ${end}) are outside [0, ${t.rows})`,
      );
    }
    const out = new Uint8Array((end - start) * t.rowBytes);
    this.source.readInto(t.fileOffset + start * t.rowBytes, out.length, out);
    return out;
  }

  /** A tensor (or rows of it) as f32; F32, F16 and BF16 only. */
  readTensorF32(name: string, options: { rows?: readonly [number, number] } = {}): Float32Array {
    const t = this.tensor(name);
    if (!COMPUTE_DTYPES.includes(t.dtype)) {
      fail(
        this.file,
        'MODEL_FORMAT_UNSUPPORTED',
        `tensor ${name} dtype`,
        `dtype ${t.dtype} is not one tandem computes with (${COMPUTE_DTYPES.join(', ')})`,
      );
    }
    const bytes = this.readTensor(name, options);
    const size = safetensorsDtypes[t.dtype] as number;
    const n = bytes.length / size;
    const out = new Float32Array(n);
    if (t.dtype === 'F32') new Uint8Array(out.buffer).set(bytes);
    else if (t.dtype === 'F16')
      for (let i = 0; i < n; i++)
        out[i] = f16Table[(bytes[2 * i] as number) | ((bytes[2 * i + 1] as number) << 8)] as number;
    else
      for (let i = 0; i < n; i++)
        out[i] = bf16ToF32((bytes[2 * i] as number) | ((bytes[2 * i + 1] as number) << 8));
    return out;
  }

  close(): void {
    this.source.close();
  }
}

/** A safetensors file in memory from named tensors (tests, fixtures); shapes row-major. */
export function encodeSafetensors(
  tensors: readonly { name: string; dtype: string; shape: number[]; data: Uint8Array }[],
  metadata?: Record<string, string>,
): Uint8Array {
  const header: Record<string, unknown> = metadata ? { __metadata__: metadata } : {};
  let offset = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.data.length] };
    offset += t.data.length;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const head = Buffer.from(json, 'utf8');
  const out = new Uint8Array(8 + head.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(head.length), true);
  out.set(head, 8);
  let at = 8 + head.length;
  for (const t of tensors) {
    out.set(t.data, at);
    at += t.data.length;
  }
  return out;
}
