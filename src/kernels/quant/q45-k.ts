import { f16ToF32, f32ToF16 } from './half.js';
import { getScaleMinK4, makeQkx2Quants, packScalesMinsK4 } from './k-common.js';
import { nearestInt } from './rounding.js';

/**
 * Q4_K and Q5_K: a 256-value super-block of 8 sub-blocks of 32, each with a 6-bit scale and
 * 6-bit min (packed in 12 bytes) relative to the block's f16 d and dmin:
 * x = d*sc*q - dmin*m, with q in 0..15 (Q4_K) or 0..31 (Q5_K).
 *
 * block_q4_K (144 bytes): f16 d; f16 dmin; u8 scales[12]; u8 qs[128]
 * block_q5_K (176 bytes): f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
 * qs: each 64-value chunk c uses 32 bytes; value 64c+l in the low nibble of byte 32c+l,
 * value 64c+32+l in the high nibble. Q5_K's fifth bit of value 64c+l is bit 2c of qh[l], of
 * value 64c+32+l bit 2c+1.
 */
const QK_K = 256;

interface Scratch {
  weights: Float32Array;
  L: Uint8Array;
  Laux: Uint8Array;
  ls: Uint8Array;
  lm: Uint8Array;
  scales: Float32Array;
  mins: Float32Array;
  sm: { sc: number; m: number };
}

function scratch(): Scratch {
  return {
    weights: new Float32Array(32),
    L: new Uint8Array(QK_K),
    Laux: new Uint8Array(32),
    ls: new Uint8Array(8),
    lm: new Uint8Array(8),
    scales: new Float32Array(8),
    mins: new Float32Array(8),
    sm: { sc: 0, m: 0 },
  };
}

const s4 = scratch();

/** Quantizes one super-block's levels into s.L and writes d, dmin and the packed scales at dst[o..o+16). */
function quantizeSuperBlock(
  src: Float32Array,
  x0: number,
  nmax: number,
  rmin: number,
  nstep: number,
  dst: Uint8Array,
  o: number,
  s: Scratch,
): void {
  let maxScale = 0;
  let maxMin = 0;
  for (let j = 0; j < 8; j++) {
    let sumX2 = 0;
    for (let l = 0; l < 32; l++) sumX2 += (src[x0 + 32 * j + l] as number) ** 2;
    const avX = Math.sqrt(sumX2 / 32);
    for (let l = 0; l < 32; l++) s.weights[l] = avX + Math.abs(src[x0 + 32 * j + l] as number);
    const [scale, min] = makeQkx2Quants(
      32,
      nmax,
      src,
      x0 + 32 * j,
      s.weights,
      s.L,
      32 * j,
      s.Laux,
      rmin,
      0.1,
      nstep,
    );
    s.scales[j] = scale;
    s.mins[j] = min;
    if (scale > maxScale) maxScale = scale;
    if (min > maxMin) maxMin = min;
  }
  const invScale = maxScale > 0 ? 63 / maxScale : 0;
  const invMin = maxMin > 0 ? 63 / maxMin : 0;
  for (let j = 0; j < 8; j++) {
    s.ls[j] = Math.min(63, nearestInt(invScale * (s.scales[j] as number)));
    s.lm[j] = Math.min(63, nearestInt(invMin * (s.mins[j] as number)));
  }
  packScalesMinsK4(s.ls, s.lm, dst, o + 4);
  const dh = f32ToF16(maxScale / 63);
  const mh = f32ToF16(maxMin / 63);
  dst[o] = dh & 0xff;
  dst[o + 1] = dh >>> 8;
  dst[o + 2] = mh & 0xff;
  dst[o + 3] = mh >>> 8;
  const d = f16ToF32(dh);
  const dmin = f16ToF32(mh);
  for (let j = 0; j < 8; j++) {
    getScaleMinK4(j, dst, o + 4, s.sm);
    const dj = d * s.sm.sc;
    if (!dj) continue;
    const dm = dmin * s.sm.m;
    for (let i = 0; i < 32; i++) {
      const l = nearestInt(((src[x0 + 32 * j + i] as number) + dm) / dj);
      s.L[32 * j + i] = Math.max(0, Math.min(nmax, l));
    }
  }
}

export function quantizeQ4_K(src: Float32Array, dst: Uint8Array): void {
  const blocks = src.length / QK_K;
  for (let b = 0; b < blocks; b++) {
    const o = b * 144;
    quantizeSuperBlock(src, b * QK_K, 15, -1, 20, dst, o, s4);
    const L = s4.L;
    for (let c = 0; c < 4; c++) {
      for (let l = 0; l < 32; l++)
        dst[o + 16 + 32 * c + l] = (L[64 * c + l] as number) | ((L[64 * c + 32 + l] as number) << 4);
    }
  }
}

export function quantizeQ5_K(src: Float32Array, dst: Uint8Array): void {
  const blocks = src.length / QK_K;
  for (let b = 0; b < blocks; b++) {
    const o = b * 176;
    quantizeSuperBlock(src, b * QK_K, 31, -0.5, 15, dst, o, s4);
    const L = s4.L;
    const qh = o + 16;
    const qs = o + 48;
    for (let l = 0; l < 32; l++) dst[qh + l] = 0;
    for (let c = 0; c < 4; c++) {
      for (let l = 0; l < 32; l++) {
        let l1 = L[64 * c + l] as number;
        let l2 = L[64 * c + 32 + l] as number;
        let h = dst[qh + l] as number;
        if (l1 > 15) {
          l1 -= 16;
          h |= 1 << (2 * c);
        }
        if (l2 > 15) {
          l2 -= 16;
          h |= 2 << (2 * c);
        }
        dst[qh + l] = h;
        dst[qs + 32 * c + l] = l1 | (l2 << 4);
      }
    }
  }
}

const sm = { sc: 0, m: 0 };

export function dequantizeQ4_K(src: Uint8Array, dst: Float32Array): void {
  const blocks = dst.length / QK_K;
  for (let b = 0; b < blocks; b++) {
    const o = b * 144;
    const d = f16ToF32((src[o] as number) | ((src[o + 1] as number) << 8));
    const dmin = f16ToF32((src[o + 2] as number) | ((src[o + 3] as number) << 8));
    const y0 = b * QK_K;
    for (let c = 0; c < 4; c++) {
      getScaleMinK4(2 * c, src, o + 4, sm);
      const d1 = d * sm.sc;
      const m1 = dmin * sm.m;
      getScaleMinK4(2 * c + 1, src, o + 4, sm);
      const d2 = d * sm.sc;
      const m2 = dmin * sm.m;
      const q = o + 16 + 32 * c;
      for (let l = 0; l < 32; l++) {
        const byte = src[q + l] as number;
        dst[y0 + 64 * c + l] = d1 * (byte & 0xf) - m1;
        dst[y0 + 64 * c + 32 + l] = d2 * (byte >>> 4) - m2;
      }
    }
  }
}

export function dequantizeQ5_K(src: Uint8Array, dst: Float32Array): void {
  const blocks = dst.length / QK_K;
  for (let b = 0; b < blocks; b++) {
    const o = b * 176;
    const d = f16ToF32((src[o] as number) | ((src[o + 1] as number) << 8));
    const dmin = f16ToF32((src[o + 2] as number) | ((src[o + 3] as number) << 8));
    const y0 = b * QK_K;
    const qh = o + 16;
    for (let c = 0; c < 4; c++) {
      getScaleMinK4(2 * c, src, o + 4, sm);
      const d1 = d * sm.sc;
      const m1 = dmin * sm.m;
      getScaleMinK4(2 * c + 1, src, o + 4, sm);
      const d2 = d * sm.sc;
      const m2 = dmin * sm.m;
      const q = o + 48 + 32 * c;
      for (let l = 0; l < 32; l++) {
        const byte = src[q + l] as number;
        const h = src[qh + l] as number;
        dst[y0 + 64 * c + l] = d1 * ((byte & 0xf) + ((h >>> (2 * c)) & 1 ? 16 : 0)) - m1;
        dst[y0 + 64 * c + 32 + l] = d2 * ((byte >>> 4) + ((h >>> (2 * c + 1)) & 1 ? 16 : 0)) - m2;
      }
    }
  }
}
