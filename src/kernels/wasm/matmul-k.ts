// K-quant weights (raw ggml super-blocks of 256) times q8_K-quantised activations:
// x16 [n, cols] i16, xd [n, cols/256] f32, xs [n, cols/32] i32 (sums of each 32 quants).
// Integer dot per sub-block, times its integer scale, summed exactly in i32 per super-block,
// then scaled in float: the same arithmetic as llama.cpp's vec_dot_*_q8_K.
import { part, f16, hsumi } from './common';

// @ts-ignore: decorator
@inline function dot16u(q: v128, x: usize): v128 {
  return i32x4.add(i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_u(q), v128.load(x)), i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_u(q), v128.load(x, 16)));
}

// @ts-ignore: decorator
@inline function dot16s(q: v128, x: usize): v128 {
  return i32x4.add(i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_s(q), v128.load(x)), i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_s(q), v128.load(x, 16)));
}

// @ts-ignore: decorator
@inline function scaleK4(q: usize, j: i32): i32 {
  return j < 4 ? load<u8>(q + j) & 63 : (load<u8>(q + j + 4) & 0xf) | ((load<u8>(q + j - 4) >> 6) << 4);
}

// @ts-ignore: decorator
@inline function minK4(q: usize, j: i32): i32 {
  return j < 4 ? load<u8>(q + j + 4) & 63 : (load<u8>(q + j + 4) >> 4) | ((load<u8>(q + j) >> 6) << 4);
}

// One row (nb super-blocks at w) dotted with one token's quants.
function rowQ4K(w: usize, nb: i32, x: usize, xd: usize, xs: usize, five: bool): f32 {
  let sum: f32 = 0;
  const bytes: usize = five ? 176 : 144;
  const m4 = i8x16.splat(0x0f);
  const one = i8x16.splat(1);
  for (let b = 0; b < nb; b++) {
    const p = w + <usize>b * bytes;
    const sc = p + 4;
    const qs = p + (five ? 48 : 16);
    const xb = x + (<usize>b << 9);
    let acc = i32x4.splat(0);
    let qh0 = i32x4.splat(0);
    let qh1 = i32x4.splat(0);
    if (five) {
      qh0 = v128.load(p + 16);
      qh1 = v128.load(p + 32);
    }
    for (let j = 0; j < 4; j++) {
      const a = v128.load(qs + (j << 5));
      const c = v128.load(qs + (j << 5) + 16);
      let la = v128.and(a, m4);
      let lc = v128.and(c, m4);
      let ha = i8x16.shr_u(a, 4);
      let hc = i8x16.shr_u(c, 4);
      if (five) {
        la = v128.or(la, i8x16.shl(v128.and(i8x16.shr_u(qh0, 2 * j), one), 4));
        lc = v128.or(lc, i8x16.shl(v128.and(i8x16.shr_u(qh1, 2 * j), one), 4));
        ha = v128.or(ha, i8x16.shl(v128.and(i8x16.shr_u(qh0, 2 * j + 1), one), 4));
        hc = v128.or(hc, i8x16.shl(v128.and(i8x16.shr_u(qh1, 2 * j + 1), one), 4));
      }
      const xo = xb + (<usize>j << 7);
      const sl = i32x4.add(dot16u(la, xo), dot16u(lc, xo + 32));
      const sh = i32x4.add(dot16u(ha, xo + 64), dot16u(hc, xo + 96));
      acc = i32x4.add(acc, i32x4.mul(sl, i32x4.splat(scaleK4(sc, 2 * j))));
      acc = i32x4.add(acc, i32x4.mul(sh, i32x4.splat(scaleK4(sc, 2 * j + 1))));
    }
    let summ = 0;
    const xg = xs + (<usize>b << 5);
    for (let j = 0; j < 8; j++) summ += minK4(sc, j) * load<i32>(xg + (j << 2));
    const dx = load<f32>(xd + (<usize>b << 2));
    sum += f16(load<u16>(p)) * dx * <f32>hsumi(acc) - f16(load<u16>(p + 2)) * dx * <f32>summ;
  }
  return sum;
}

function rowQ6K(w: usize, nb: i32, x: usize, xd: usize): f32 {
  let sum: f32 = 0;
  const m4 = i8x16.splat(0x0f);
  const m3 = i8x16.splat(3);
  const k32 = i8x16.splat(32);
  for (let b = 0; b < nb; b++) {
    const p = w + <usize>b * 210;
    const sc = p + 192;
    const xb = x + (<usize>b << 9);
    let acc = i32x4.splat(0);
    for (let h = 0; h < 2; h++) {
      const ql = p + (<usize>h << 6);
      const qh = p + 128 + (<usize>h << 5);
      for (let c = 0; c < 32; c += 16) {
        const a = v128.load(ql + c);
        const bq = v128.load(ql + 32 + c);
        const hh = v128.load(qh + c);
        const q1 = i8x16.sub(v128.or(v128.and(a, m4), i8x16.shl(v128.and(hh, m3), 4)), k32);
        const q2 = i8x16.sub(v128.or(v128.and(bq, m4), i8x16.shl(v128.and(i8x16.shr_u(hh, 2), m3), 4)), k32);
        const q3 = i8x16.sub(v128.or(i8x16.shr_u(a, 4), i8x16.shl(v128.and(i8x16.shr_u(hh, 4), m3), 4)), k32);
        const q4 = i8x16.sub(v128.or(i8x16.shr_u(bq, 4), i8x16.shl(i8x16.shr_u(hh, 6), 4)), k32);
        const e = xb + (<usize>(h * 128 + c) << 1);
        const g = sc + (h << 3) + (c >> 4);
        acc = i32x4.add(acc, i32x4.mul(dot16s(q1, e), i32x4.splat(load<i8>(g))));
        acc = i32x4.add(acc, i32x4.mul(dot16s(q2, e + 64), i32x4.splat(load<i8>(g + 2))));
        acc = i32x4.add(acc, i32x4.mul(dot16s(q3, e + 128), i32x4.splat(load<i8>(g + 4))));
        acc = i32x4.add(acc, i32x4.mul(dot16s(q4, e + 192), i32x4.splat(load<i8>(g + 6))));
      }
    }
    sum += f16(load<u16>(p + 208)) * load<f32>(xd + (<usize>b << 2)) * <f32>hsumi(acc);
  }
  return sum;
}

/** type: 12 Q4_K, 13 Q5_K, 14 Q6_K. Rows [4 * part(tiles), ...) of this thread, every token. */
export function mm_k(type: i32, w: usize, rowBytes: i32, cols: i32, x16: usize, xd: usize, xs: usize, n: i32, y: usize, ystride: i32, tiles: i32, tid: i32, nt: i32): void {
  const nb = cols >> 8;
  const r0 = part(tiles, tid, nt) * 4;
  const r1 = part(tiles, tid + 1, nt) * 4;
  for (let r = r0; r < r1; r++) {
    const wr = w + <usize>r * rowBytes;
    for (let t = 0; t < n; t++) {
      const xt = x16 + <usize>t * cols * 2;
      const dt = xd + <usize>t * nb * 4;
      const v = type == 14 ? rowQ6K(wr, nb, xt, dt) : rowQ4K(wr, nb, xt, dt, xs + <usize>t * (cols >> 5) * 4, type == 13);
      store<f32>(y + ((<usize>t * ystride + r) << 2), v);
    }
  }
}
