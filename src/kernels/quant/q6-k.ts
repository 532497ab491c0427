import { f16ToF32, f32ToF16 } from './half.js';
import { GROUP_MAX_EPS, makeQxQuants } from './k-common.js';
import { nearestInt } from './rounding.js';

/**
 * block_q6_K (210 bytes for 256 values): u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d.
 * 16 sub-blocks of 16 values, x = d * scales[sub] * (q - 32), q in 0..63.
 * Each 128-value half h uses ql[64h..64h+64) and qh[32h..32h+32): for l < 32, value
 * 128h+l is the low nibble of ql[64h+l], +32 the low nibble of ql[64h+32+l], +64 the high
 * nibble of ql[64h+l], +96 the high nibble of ql[64h+32+l]; their top 2 bits are bits
 * 0-1, 2-3, 4-5, 6-7 of qh[32h+l]. Value i's scale is scales[i / 16].
 */
const QK_K = 256;
const BYTES = 210;

const L = new Uint8Array(QK_K);
const scales = new Float32Array(16);

export function quantizeQ6_K(src: Float32Array, dst: Uint8Array): void {
  const blocks = src.length / QK_K;
  for (let b = 0; b < blocks; b++) {
    const x0 = b * QK_K;
    const o = b * BYTES;
    let maxScale = 0;
    let maxAbsScale = 0;
    for (let ib = 0; ib < 16; ib++) {
      const scale = makeQxQuants(16, 32, src, x0 + 16 * ib, L, 16 * ib);
      scales[ib] = scale;
      if (Math.abs(scale) > maxAbsScale) {
        maxAbsScale = Math.abs(scale);
        maxScale = scale;
      }
    }
    if (maxAbsScale < GROUP_MAX_EPS) {
      dst.fill(0, o, o + BYTES);
      continue;
    }
    const iscale = -128 / maxScale;
    const dh = f32ToF16(1 / iscale);
    dst[o + 208] = dh & 0xff;
    dst[o + 209] = dh >>> 8;
    const d = f16ToF32(dh);
    for (let ib = 0; ib < 16; ib++) {
      const sc = Math.min(127, nearestInt(iscale * (scales[ib] as number)));
      dst[o + 192 + ib] = sc & 0xff;
      const dj = d * sc;
      if (!dj) continue;
      for (let i = 0; i < 16; i++) {
        const l = nearestInt((src[x0 + 16 * ib + i] as number) / dj);
        L[16 * ib + i] = Math.max(-32, Math.min(31, l)) + 32;
      }
    }
    for (let h = 0; h < 2; h++) {
      const ql = o + 64 * h;
      const qh = o + 128 + 32 * h;
      const j = 128 * h;
      for (let l = 0; l < 32; l++) {
        const a = L[j + l] as number;
        const c = L[j + l + 32] as number;
        const e = L[j + l + 64] as number;
        const f = L[j + l + 96] as number;
        dst[ql + l] = (a & 0xf) | ((e & 0xf) << 4);
        dst[ql + l + 32] = (c & 0xf) | ((f & 0xf) << 4);
        dst[qh + l] = (a >>> 4) | ((c >>> 4) << 2) | ((e >>> 4) << 4) | ((f >>> 4) << 6);
      }
    }
  }
}

export function dequantizeQ6_K(src: Uint8Array, dst: Float32Array): void {
  const blocks = dst.length / QK_K;
  for (let b = 0; b < blocks; b++) {
    const o = b * BYTES;
    const d = f16ToF32((src[o + 208] as number) | ((src[o + 209] as number) << 8));
    const y0 = b * QK_K;
    for (let h = 0; h < 2; h++) {
      const ql = o + 64 * h;
      const qh = o + 128 + 32 * h;
      const sc = o + 192 + 8 * h;
      const y = y0 + 128 * h;
      for (let l = 0; l < 32; l++) {
        const is = l >>> 4;
        const lo = src[ql + l] as number;
        const hi = src[ql + l + 32] as number;
        const hb = src[qh + l] as number;
        const q1 = ((lo & 0xf) | ((hb & 3) << 4)) - 32;
        const q2 = ((hi & 0xf) | (((hb >>> 2) & 3) << 4)) - 32;
        const q3 = ((lo >>> 4) | (((hb >>> 4) & 3) << 4)) - 32;
        const q4 = ((hi >>> 4) | (((hb >>> 6) & 3) << 4)) - 32;
        dst[y + l] = d * (((src[sc + is] as number) << 24) >> 24) * q1;
        dst[y + l + 32] = d * (((src[sc + is + 2] as number) << 24) >> 24) * q2;
        dst[y + l + 64] = d * (((src[sc + is + 4] as number) << 24) >> 24) * q3;
        dst[y + l + 96] = d * (((src[sc + is + 6] as number) << 24) >> 24) * q4;
      }
    }
  }
}
