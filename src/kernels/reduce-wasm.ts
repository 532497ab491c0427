import { readFile } from 'node:fs/promises';
import { buildReduceWasm } from './build-kernels.js';
import type { DType, DTypeArray } from './dtype.js';
import type { ReduceOp } from './reduce.js';
import { wasmApi } from './wasm-api.js';

/**
 * The WebAssembly SIMD reductions (wasm/reduce.ts, built into build/wasm/reduce.wasm): the
 * portable fast path of reduceFast where the native C kernels cannot be built, equal to
 * reduce.ts bit for bit. A wasm function reads only its own memory, so every chunk of both
 * operands is copied into the module's two chunk buffers and the result copied back out; the
 * memory is the module's own unshared one (a copy into a SharedArrayBuffer costs several
 * times more) and never grows, so the views made here stay valid.
 */
export type WasmReduce = (op: ReduceOp, dtype: DType, acc: DTypeArray, other: DTypeArray) => void;

interface ReduceExports {
  memory: { buffer: ArrayBuffer };
  CHUNK_BYTES: { value: number };
  ACC: { value: number };
  OTHER: { value: number };
  reduce(dtype: number, op: number, n: number): void;
}

type View = Float32Array | Int32Array | Uint16Array;
type ViewClass = {
  new (buffer: ArrayBuffer, offset: number, length: number): View;
  readonly BYTES_PER_ELEMENT: number;
};

const dtypeCode: Readonly<Record<DType, number>> = { f32: 0, i32: 1, f16: 2, bf16: 3 };
const opCode: Readonly<Record<ReduceOp, number>> = { sum: 0, max: 1, min: 2 };

/** Builds reduce.wasm when stale, instantiates it and returns its reduction; throws when asc or WebAssembly fails. */
export async function loadWasmReduce(): Promise<WasmReduce> {
  const module = await wasmApi.compile(await readFile(await buildReduceWasm()));
  return reducer(new wasmApi.Instance(module, {}).exports as unknown as ReduceExports);
}

/** acc[i] = acc[i] (op) other[i] for i < acc.length (other at least as long: the caller checks), chunk by chunk. */
function reducer(ex: ReduceExports): WasmReduce {
  const bytes = ex.CHUNK_BYTES.value;
  const pair = (T: ViewClass): [View, View] => [
    new T(ex.memory.buffer, ex.ACC.value, bytes / T.BYTES_PER_ELEMENT),
    new T(ex.memory.buffer, ex.OTHER.value, bytes / T.BYTES_PER_ELEMENT),
  ];
  // views of the element type, so that `set` copies bits rather than converting values
  const half = pair(Uint16Array);
  const views: Readonly<Record<DType, [View, View]>> = {
    f32: pair(Float32Array),
    i32: pair(Int32Array),
    f16: half,
    bf16: half,
  };
  return (op, dtype, acc, other) => {
    const [a, b] = views[dtype];
    const chunk = a.length;
    const n = acc.length;
    for (let i = 0; i < n; i += chunk) {
      const c = Math.min(chunk, n - i);
      a.set(acc.subarray(i, i + c));
      b.set(other.subarray(i, i + c));
      ex.reduce(dtypeCode[dtype], opCode[op], c);
      acc.set(c === chunk ? a : a.subarray(0, c), i);
    }
  };
}
