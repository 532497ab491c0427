import { f16ToF32, f32ToF16 } from './half.js';
import { fround, truncInt } from './rounding.js';

/**
 * block_q4_0 (18 bytes for 32 values): f16 d; u8 qs[16]. Byte j holds value j in its low
 * nibble and value j+16 in its high nibble; x = d * (q - 8).
 */
const QK = 32;
const BYTES = 18;

export function quantizeQ4_0(src: Float32Array, dst: Uint8Array): void {
  const blocks = src.length / QK;
  for (let b = 0; b < blocks; b++) {
    const x0 = b * QK;
    const o = b * BYTES;
    let amax = 0;
    let max = 0;
    for (let j = 0; j < QK; j++) {
      const v = src[x0 + j] as number;
      if (amax < Math.abs(v)) {
        amax = Math.abs(v);
        max = v;
      }
    }
    const d = fround(max / -8);
    const id = d ? fround(1 / d) : 0;
    const h = f32ToF16(d);
    dst[o] = h & 0xff;
    dst[o + 1] = h >>> 8;
    for (let j = 0; j < QK / 2; j++) {
      const a = fround((src[x0 + j] as number) * id);
      const c = fround((src[x0 + j + 16] as number) * id);
      const q0 = Math.min(15, truncInt(fround(a + 8.5)));
      const q1 = Math.min(15, truncInt(fround(c + 8.5)));
      dst[o + 2 + j] = q0 | (q1 << 4);
    }
  }
}

export function dequantizeQ4_0(src: Uint8Array, dst: Float32Array): void {
  const blocks = dst.length / QK;
  for (let b = 0; b < blocks; b++) {
    const o = b * BYTES;
    const d = f16ToF32((src[o] as number) | ((src[o + 1] as number) << 8));
    const y0 = b * QK;
    for (let j = 0; j < QK / 2; j++) {
      const q = src[o + 2 + j] as number;
      dst[y0 + j] = ((q & 0xf) - 8) * d;
      dst[y0 + j + 16] = ((q >>> 4) - 8) * d;
    }
  }
}
