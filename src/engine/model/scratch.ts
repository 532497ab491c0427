import { reduceFast } from '../../kernels/reduce-native.js';

/**
 * Named activation buffers reused across forward calls, so decoding allocates nothing per
 * token. A buffer grows (to the largest size asked for) and is handed out as a view of the
 * exact length requested.
 */
export class Scratch {
  private readonly buffers = new Map<string, Float32Array>();

  f32(name: string, length: number): Float32Array {
    let buf = this.buffers.get(name);
    if (!buf || buf.length < length) {
      // 64-byte aligned capacity in elements keeps views of different sizes on one buffer.
      buf = new Float32Array(Math.max(16, Math.ceil(length / 16) * 16));
      this.buffers.set(name, buf);
    }
    return buf.length === length ? buf : buf.subarray(0, length);
  }
}

/**
 * y += x element-wise (f32, one rounding per element: the same bits in C as in TypeScript),
 * through the native reduction once loadFastReduce has run (Model.load starts it).
 */
export function addInPlace(y: Float32Array, x: Float32Array): void {
  reduceFast('sum', 'f32', y, x);
}

/** Adds `bias` [width] to every row of x [n, width]. */
export function addBias(x: Float32Array, bias: Float32Array, n: number): void {
  const w = bias.length;
  for (let t = 0; t < n; t++) {
    const o = t * w;
    for (let i = 0; i < w; i++) x[o + i] = (x[o + i] as number) + (bias[i] as number);
  }
}
