import { copyBytes } from '../kernels/copy.js';

/**
 * Byte moves between scatter-gather lists (arrays of views, in list order) and frame
 * payloads, for the queue pair's send and receive paths.
 */

/** Below this many bytes a plain loop copies faster than TypedArray.set. */
const SMALL_COPY = 16;

/** Copies `len` bytes at `from` of `src` to `at` of `dst`. */
export function copyRange(dst: Uint8Array, at: number, src: Uint8Array, from: number, len: number): void {
  if (len > SMALL_COPY) copyBytes(dst, at, src.subarray(from, from + len));
  else for (let i = 0; i < len; i++) dst[at + i] = src[from + i] as number;
}

/** Copies `src` into `dst` at `at`. */
function copyInto(dst: Uint8Array, src: Uint8Array, at: number): void {
  const n = src.length;
  if (n > SMALL_COPY) copyBytes(dst, at, src);
  else for (let i = 0; i < n; i++) dst[at + i] = src[i] as number;
}

/** Views of `len` bytes starting at byte `from` of the concatenation of `views`. */
export function sliceViews(views: readonly Uint8Array[], from: number, len: number): readonly Uint8Array[] {
  if (views.length === 1 && from === 0 && (views[0] as Uint8Array).length === len) return views;
  const out: Uint8Array[] = [];
  for (const v of views) {
    if (len === 0) break;
    if (from >= v.length) {
      from -= v.length;
      continue;
    }
    const take = Math.min(v.length - from, len);
    out.push(v.subarray(from, from + take));
    len -= take;
    from = 0;
  }
  return out;
}

/** Copies `data` to byte `at` of the concatenation of `targets`; what does not fit is dropped. */
export function scatter(targets: readonly Uint8Array[], at: number, data: Uint8Array): void {
  let src = 0;
  for (const t of targets) {
    if (src === data.length) return;
    if (at >= t.length) {
      at -= t.length;
      continue;
    }
    const take = Math.min(t.length - at, data.length - src);
    copyInto(t, src === 0 && take === data.length ? data : data.subarray(src, src + take), at);
    src += take;
    at = 0;
  }
}
