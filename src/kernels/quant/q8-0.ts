import { f16ToF32, f32ToF16 } from './half.js';
import { fround, roundAway } from './rounding.js';

/** block_q8_0 (34 bytes for 32 values): f16 d; i8 qs[32]. x = d * q. */
const QK = 32;
const BYTES = 34;

export function quantizeQ8_0(src: Float32Array, dst: Uint8Array): void {
  const blocks = src.length / QK;
  for (let b = 0; b < blocks; b++) {
    const x0 = b * QK;
    const o = b * BYTES;
    let amax = 0;
    for (let j = 0; j < QK; j++) {
      const a = Math.abs(src[x0 + j] as number);
      if (a > amax) amax = a;
    }
    const d = fround(amax / 127);
    const id = d ? fround(1 / d) : 0;
    const h = f32ToF16(d);
    dst[o] = h & 0xff;
    dst[o + 1] = h >>> 8;
    for (let j = 0; j < QK; j++) dst[o + 2 + j] = roundAway(fround((src[x0 + j] as number) * id)) & 0xff;
  }
}

export function dequantizeQ8_0(src: Uint8Array, dst: Float32Array): void {
  const blocks = dst.length / QK;
  for (let b = 0; b < blocks; b++) {
    const o = b * BYTES;
    const d = f16ToF32((src[o] as number) | ((src[o + 1] as number) << 8));
    const y0 = b * QK;
    for (let j = 0; j < QK; j++) dst[y0 + j] = d * (((src[o + 2 + j] as number) << 24) >> 24);
  }
}
