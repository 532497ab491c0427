// K-quant weights (raw ggml super-blocks of 256) times q8_K-quantised activations:
// x16 [n, cols] i16, xd [n, cols/256] f32, xs [n, cols/32] i32 (sums of each 32 quants).
// Integer dot per sub-block, times its integer scale, summed exactly in i32 per super-block,
// then scaled in float: the same arithmetic as llama.cpp's vec_dot_*_q8_K.
import { part, f16, hsumi, hsum4i } from './common';

// @ts-ignore: decorator
@inline function dot16u(q: v128, x: usize): v128 {
  return i32x4.add(i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_u(q), v128.load(x)), i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_u(q), v128.load(x, 16)));
}

// @ts-ignore: decorator
@inline function dot16s(q: v128, x: usize): v128 {
  return i32x4.add(i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_s(q), v128.load(x)), i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_s(q), v128.load(x, 16)));
}

// @ts-ignore: decorator
@inline function bytes4(w: u32): v128 {
  // the four bytes of w as i32 lanes
  return i32x4.extend_low_i16x8_u(i16x8.extend_low_i8x16_u(i32x4.splat(w)));
}

// One row (nb super-blocks at w) dotted with one token's quants. The 12 scale bytes unpack
// with word masks into scales [sc0..3], [sc4..7] and mins [m0..3], [m4..7] (6 bits each).
function rowQ4K(w: usize, nb: i32, x: usize, xd: usize, xs: usize, five: bool): f32 {
  let sum: f32 = 0;
  const bytes: usize = five ? 176 : 144;
  const m4 = i8x16.splat(0x0f);
  const one = i8x16.splat(1);
  for (let b = 0; b < nb; b++) {
    const p = w + <usize>b * bytes;
    const u0 = load<u32>(p, 4);
    const u1 = load<u32>(p, 8);
    const u2 = load<u32>(p, 12);
    const scLo = bytes4(u0 & 0x3f3f3f3f);
    const mLo = bytes4(u1 & 0x3f3f3f3f);
    const scHi = bytes4((u2 & 0x0f0f0f0f) | ((u0 & 0xc0c0c0c0) >> 2));
    const mHi = bytes4(((u2 >> 4) & 0x0f0f0f0f) | ((u1 & 0xc0c0c0c0) >> 2));
    const qs = p + (five ? 48 : 16);
    const xb = x + (<usize>b << 9);
    let qh0 = i32x4.splat(0);
    let qh1 = i32x4.splat(0);
    if (five) {
      qh0 = v128.load(p + 16);
      qh1 = v128.load(p + 32);
    }
    // s[j]: i32x4 partial dot of sub-block j; sub-blocks 2j (low nibbles) and 2j+1 (high)
    let s0 = i32x4.splat(0);
    let s1 = i32x4.splat(0);
    let s2 = i32x4.splat(0);
    let s3 = i32x4.splat(0);
    let s4 = i32x4.splat(0);
    let s5 = i32x4.splat(0);
    let s6 = i32x4.splat(0);
    let s7 = i32x4.splat(0);
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
      if (j == 0) { s0 = sl; s1 = sh; }
      else if (j == 1) { s2 = sl; s3 = sh; }
      else if (j == 2) { s4 = sl; s5 = sh; }
      else { s6 = sl; s7 = sh; }
    }
    const xg = xs + (<usize>b << 5);
    const si = i32x4.add(i32x4.mul(hsum4i(s0, s1, s2, s3), scLo), i32x4.mul(hsum4i(s4, s5, s6, s7), scHi));
    const mi = i32x4.add(i32x4.mul(v128.load(xg), mLo), i32x4.mul(v128.load(xg, 16), mHi));
    const dx = load<f32>(xd + (<usize>b << 2));
    sum += f16(load<u16>(p)) * dx * <f32>hsumi(si) - f16(load<u16>(p + 2)) * dx * <f32>hsumi(mi);
  }
  return sum;
}

// @ts-ignore: decorator
@inline function q6(lo: v128, hi: v128, shift: i32): v128 {
  // 6-bit quant (4 low bits from lo, 2 high bits of hi at `shift`) minus 32, as i8
  return i8x16.sub(v128.or(lo, i8x16.shl(v128.and(i8x16.shr_u(hi, shift), i8x16.splat(3)), 4)), i8x16.splat(32));
}

// @ts-ignore: decorator
@inline function scales4(p: usize): v128 {
  return i32x4.extend_low_i16x8_s(i16x8.extend_low_i8x16_s(v128.load32_zero(p)));
}

function rowQ6K(w: usize, nb: i32, x: usize, xd: usize): f32 {
  let sum: f32 = 0;
  const m4 = i8x16.splat(0x0f);
  for (let b = 0; b < nb; b++) {
    const p = w + <usize>b * 210;
    const sc = p + 192;
    const xb = x + (<usize>b << 9);
    let acc = i32x4.splat(0);
    for (let h = 0; h < 2; h++) {
      const ql = p + (<usize>h << 6);
      const qh = p + 128 + (<usize>h << 5);
      const e = xb + (<usize>h << 8);
      // c = 0: groups 8h + 0, 2, 4, 6
      const a0 = v128.load(ql);
      const b0 = v128.load(ql + 32);
      const h0 = v128.load(qh);
      const t0 = dot16s(q6(v128.and(a0, m4), h0, 0), e);
      const t2 = dot16s(q6(v128.and(b0, m4), h0, 2), e + 64);
      const t4 = dot16s(q6(i8x16.shr_u(a0, 4), h0, 4), e + 128);
      const t6 = dot16s(q6(i8x16.shr_u(b0, 4), h0, 6), e + 192);
      // c = 16: groups 8h + 1, 3, 5, 7
      const a1 = v128.load(ql + 16);
      const b1 = v128.load(ql + 48);
      const h1 = v128.load(qh + 16);
      const t1 = dot16s(q6(v128.and(a1, m4), h1, 0), e + 32);
      const t3 = dot16s(q6(v128.and(b1, m4), h1, 2), e + 96);
      const t5 = dot16s(q6(i8x16.shr_u(a1, 4), h1, 4), e + 160);
      const t7 = dot16s(q6(i8x16.shr_u(b1, 4), h1, 6), e + 224);
      const g = sc + (<usize>h << 3);
      acc = i32x4.add(acc, i32x4.mul(hsum4i(t0, t1, t2, t3), scales4(g)));
      acc = i32x4.add(acc, i32x4.mul(hsum4i(t4, t5, t6, t7), scales4(g + 4)));
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
