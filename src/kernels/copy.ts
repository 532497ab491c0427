import { createRequire } from 'node:module';
import { bytesOf } from './dtype.js';

/**
 * Byte copies for the transports' hot paths. V8 copies into or out of a SharedArrayBuffer
 * (every shm segment is one) word by word with relaxed atomics, at about a quarter of
 * memcpy's speed, while libc's memmove called through koffi on the same views runs at
 * memcpy's. So copies of at least NATIVE_COPY_MIN bytes go to libc; smaller ones stay in
 * JavaScript, where the FFI call would cost more than it saves (docs/fabric.md, "Providers",
 * has the figures). Ordering between processes is kept by the Atomics that publish the data
 * (ring indices, key states), as it is in C.
 */
export const NATIVE_COPY_MIN = 8192;

type Move = (dst: Uint8Array, src: Uint8Array, n: number) => unknown;

function loadMove(): Move | undefined {
  if (process.env.TANDEM_NATIVE_COPY === '0') return undefined;
  const name =
    process.platform === 'linux'
      ? 'libc.so.6'
      : process.platform === 'darwin'
        ? 'libSystem.B.dylib'
        : undefined;
  if (name === undefined) return undefined;
  try {
    const koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
    return koffi.load(name).func('uintptr_t memmove(void *dst, const void *src, size_t n)') as Move;
  } catch {
    return undefined;
  }
}

const move = loadMove();

/** Whether copies of NATIVE_COPY_MIN bytes and more run through libc here. */
export const nativeCopy = move !== undefined;

/** dst[at, at + src.length) = src (the ranges must not overlap). */
export function copyBytes(dst: Uint8Array, at: number, src: Uint8Array): void {
  const n = src.byteLength;
  if (move === undefined || n < NATIVE_COPY_MIN) {
    dst.set(src, at);
    return;
  }
  if (at < 0 || at + n > dst.byteLength)
    throw new RangeError(`copyBytes: ${n} bytes at ${at} do not fit in ${dst.byteLength}`);
  move(at === 0 ? dst : dst.subarray(at), src, n);
}

/**
 * dst[at, at + src.length) = src for f32 views, `at` in elements (the ranges must not overlap):
 * large copies through libc as copyBytes. The kernels' arenas are shared wasm memories: the
 * activations' copies that stay on the calling thread (wasm-rows.ts) and the KV stores take
 * this path.
 */
export function copyF32(dst: Float32Array, at: number, src: Float32Array): void {
  if (move === undefined || src.byteLength < NATIVE_COPY_MIN) dst.set(src, at);
  else copyBytes(bytesOf(dst), at * 4, bytesOf(src));
}
