// Q8_0 and Q4_0 weights times q8_0-quantised activations.
// Weights are repacked by the host: quants [rowsPad, cols] (Q8_0: one i8 each; Q4_0: 16 bytes
// per 32-block, low nibbles = elements 0..15, high = 16..31) and scales [rowsPad/4, nb, 4] f32
// (the four rows of a tile side by side). Activations: x16 [n, cols] i16, xd [n, nb] f32,
// xs [n, nb] i32. Output y: [n, ystride] f32, ystride = rowsPad.
import { part, hsum4i, f16 } from './common';

// @ts-ignore: decorator
@inline function dotQ8(w: usize, x0: v128, x1: v128, x2: v128, x3: v128): v128 {
  let s = i32x4.dot_i16x8_s(v128.load8x8_s(w), x0);
  s = i32x4.add(s, i32x4.dot_i16x8_s(v128.load8x8_s(w, 8), x1));
  s = i32x4.add(s, i32x4.dot_i16x8_s(v128.load8x8_s(w, 16), x2));
  return i32x4.add(s, i32x4.dot_i16x8_s(v128.load8x8_s(w, 24), x3));
}

// @ts-ignore: decorator
@inline function dotQ4(w: usize, x0: v128, x1: v128, x2: v128, x3: v128): v128 {
  const v = v128.load(w);
  const lo = v128.and(v, i8x16.splat(0x0f));
  const hi = i8x16.shr_u(v, 4);
  let s = i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_u(lo), x0);
  s = i32x4.add(s, i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_u(lo), x1));
  s = i32x4.add(s, i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_u(hi), x2));
  return i32x4.add(s, i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_u(hi), x3));
}

// One tile of 4 rows times one token: y[0..3] = per-block sum of (int dot) * dw * dx.
function tileQ8(w: usize, rowBytes: usize, s: usize, nb: i32, x: usize, xd: usize, y: usize): void {
  let acc = f32x4.splat(0);
  for (let b = 0; b < nb; b++) {
    const xb = x + (<usize>b << 6);
    const x0 = v128.load(xb);
    const x1 = v128.load(xb, 16);
    const x2 = v128.load(xb, 32);
    const x3 = v128.load(xb, 48);
    const wb = w + (<usize>b << 5);
    const v = hsum4i(dotQ8(wb, x0, x1, x2, x3), dotQ8(wb + rowBytes, x0, x1, x2, x3), dotQ8(wb + 2 * rowBytes, x0, x1, x2, x3), dotQ8(wb + 3 * rowBytes, x0, x1, x2, x3));
    const sc = f32x4.mul(v128.load(s + (<usize>b << 4)), f32x4.splat(load<f32>(xd + (<usize>b << 2))));
    acc = f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(v), sc));
  }
  v128.store(y, acc);
}

function tileQ4(w: usize, rowBytes: usize, s: usize, nb: i32, x: usize, xd: usize, xs: usize, y: usize): void {
  let acc = f32x4.splat(0);
  for (let b = 0; b < nb; b++) {
    const xb = x + (<usize>b << 6);
    const x0 = v128.load(xb);
    const x1 = v128.load(xb, 16);
    const x2 = v128.load(xb, 32);
    const x3 = v128.load(xb, 48);
    const wb = w + (<usize>b << 4);
    let v = hsum4i(dotQ4(wb, x0, x1, x2, x3), dotQ4(wb + rowBytes, x0, x1, x2, x3), dotQ4(wb + 2 * rowBytes, x0, x1, x2, x3), dotQ4(wb + 3 * rowBytes, x0, x1, x2, x3));
    // quants are stored unsigned (q + 8): subtract 8 * sum(x) once per block
    v = i32x4.sub(v, i32x4.splat(load<i32>(xs + (<usize>b << 2)) << 3));
    const sc = f32x4.mul(v128.load(s + (<usize>b << 4)), f32x4.splat(load<f32>(xd + (<usize>b << 2))));
    acc = f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(v), sc));
  }
  v128.store(y, acc);
}

/** y = W x for n tokens, tiles [part(tiles, tid), part(tiles, tid + 1)) of this thread. */
export function mm_q8_0(wq: usize, ws: usize, cols: i32, x16: usize, xd: usize, xs: usize, n: i32, y: usize, ystride: i32, tiles: i32, tid: i32, nt: i32): void {
  const nb = cols >> 5;
  const t0 = part(tiles, tid, nt);
  const t1 = part(tiles, tid + 1, nt);
  for (let tile = t0; tile < t1; tile++) {
    const w = wq + <usize>tile * 4 * cols;
    const s = ws + <usize>tile * nb * 16;
    for (let t = 0; t < n; t++) {
      tileQ8(w, cols, s, nb, x16 + <usize>t * cols * 2, xd + <usize>t * nb * 4, y + ((<usize>t * ystride + tile * 4) << 2));
    }
  }
}

export function mm_q4_0(wq: usize, ws: usize, cols: i32, x16: usize, xd: usize, xs: usize, n: i32, y: usize, ystride: i32, tiles: i32, tid: i32, nt: i32): void {
  const nb = cols >> 5;
  const rowBytes = <usize>cols >> 1;
  const t0 = part(tiles, tid, nt);
  const t1 = part(tiles, tid + 1, nt);
  for (let tile = t0; tile < t1; tile++) {
    const w = wq + <usize>tile * 4 * rowBytes;
    const s = ws + <usize>tile * nb * 16;
    for (let t = 0; t < n; t++) {
      tileQ4(w, rowBytes, s, nb, x16 + <usize>t * cols * 2, xd + <usize>t * nb * 4, xs + <usize>t * nb * 4, y + ((<usize>t * ystride + tile * 4) << 2));
    }
  }
}

/**
 * Repacks `rows` rows of ggml Q8_0/Q4_0 blocks at src (blockBytes each: f16 scale, then
 * qbytes quant bytes) as rows r0.. of the layout above (quants [rowsPad, nb * qbytes],
 * scales [rowsPad/4, nb, 4] f32).
 */
export function repack_q(src: usize, rows: i32, r0: i32, cols: i32, blockBytes: i32, qbytes: i32, wq: usize, ws: usize): void {
  const nb = cols >> 5;
  const rowQ = <usize>nb * qbytes;
  for (let i = 0; i < rows; i++) {
    const r = r0 + i;
    const s = src + <usize>i * nb * blockBytes;
    const q = wq + <usize>r * rowQ;
    const sc = ws + ((<usize>(r >> 2) * nb) << 4) + ((r & 3) << 2);
    for (let b = 0; b < nb; b++) {
      const p = s + <usize>b * blockBytes;
      store<f32>(sc + (<usize>b << 4), f16(load<u16>(p)));
      if (qbytes == 32) {
        v128.store(q + (<usize>b << 5), v128.load(p + 2));
        v128.store(q + (<usize>b << 5), v128.load(p + 18), 16);
      } else {
        v128.store(q + (<usize>b << 4), v128.load(p + 2));
      }
    }
  }
}
