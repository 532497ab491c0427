import { TandemError } from '../../errors/index.js';
import { ggmlTypeInfo } from '../../kernels/quant/types.js';

/** One tensor of a model file: ggml type id and dims in GGUF order (contiguous first). */
export interface TensorEntry {
  type: number;
  dims: readonly number[];
}

/**
 * What the model code needs from a model file: metadata, the tensor list, and row-range
 * reads (a shard loads only its slices). A tensor is read as a matrix of
 * `rows = product(dims[1..])` rows of `dims[0]` elements each, so rows of a 3-D expert
 * tensor [cols, ff, experts] run expert after expert.
 */
export interface ModelFile {
  meta(key: string): unknown;
  readonly tensors: ReadonlyMap<string, TensorEntry>;
  /**
   * Reads rows [start, start + count) of tensor `name` as raw ggml bytes. When `into` is
   * given (and large enough) the bytes land there and a view of it is returned.
   */
  readRows(name: string, start: number, count: number, into?: Uint8Array): Uint8Array | Promise<Uint8Array>;
  /**
   * How many reads a loader may keep in flight (default 1): a file whose reads wait on a link
   * (a remote model) sets more, so the next reads travel while earlier bytes are uploaded.
   */
  readonly readsInFlight?: number;
}

/** Row width (elements) and row count of a tensor viewed as a matrix. */
export function matrixShape(entry: TensorEntry): { rows: number; cols: number } {
  const cols = entry.dims[0] ?? 1;
  let rows = 1;
  for (let i = 1; i < entry.dims.length; i++) rows *= entry.dims[i] as number;
  return { rows, cols };
}

/** Bytes of one row of `cols` elements of ggml type `type`. */
export function rowBytes(type: number, cols: number): number {
  const info = ggmlTypeInfo(type);
  if (!info || cols % info.blockSize !== 0) {
    throw new TandemError(
      'MODEL_TENSOR',
      `a row of ${cols} elements of ggml type ${info?.name ?? type} has no whole number of blocks`,
      {
        hint: 'the tensor type is unknown or its rows do not fill whole quantisation blocks; re-quantise the model',
        details: { type, cols },
      },
    );
  }
  return (cols / info.blockSize) * info.typeSize;
}

/** An in-memory model file: for unit tests and for models built in code. */
export class MemoryModelFile implements ModelFile {
  readonly tensors: ReadonlyMap<string, TensorEntry>;
  private readonly data: ReadonlyMap<string, Uint8Array>;
  private readonly metadata: ReadonlyMap<string, unknown>;

  constructor(
    metadata: ReadonlyMap<string, unknown>,
    tensors: ReadonlyMap<string, TensorEntry & { data: Uint8Array }>,
  ) {
    this.metadata = metadata;
    this.tensors = new Map([...tensors].map(([name, t]) => [name, { type: t.type, dims: t.dims }]));
    this.data = new Map([...tensors].map(([name, t]) => [name, t.data]));
  }

  meta(key: string): unknown {
    return this.metadata.get(key);
  }

  readRows(name: string, start: number, count: number, into?: Uint8Array): Uint8Array {
    const entry = this.tensors.get(name);
    const bytes = this.data.get(name);
    if (!entry || !bytes) throw missingTensor(name);
    const stride = rowBytes(entry.type, matrixShape(entry).cols);
    const view = bytes.subarray(start * stride, (start + count) * stride);
    if (!into) return view;
    into.set(view);
    return into.subarray(0, view.byteLength);
  }
}

export function missingTensor(name: string): TandemError {
  return new TandemError('MODEL_TENSOR', `the model file has no tensor '${name}'`, {
    hint: 'the file is incomplete or not of the architecture it claims; re-export it',
    details: { name },
  });
}
