// F32, F16 and BF16 weights [rowsPad, cols] (raw ggml rows) times f32 activations x [n, cols]
// (already rounded by the host to the weight's dot type). Output y: [n, ystride] f32.
import { part, hsum4f } from './common';

// @ts-ignore: decorator
@inline function loadW(type: i32, p: usize): v128 {
  if (type == 0) return v128.load(p);
  const h = v128.load16x4_u(p);
  if (type == 30) return i32x4.shl(h, 16);
  // f16 -> f32: move exponent+mantissa into place, rescale by 2^112 (handles subnormals), add sign
  const mag = f32x4.mul(i32x4.shl(v128.and(h, i32x4.splat(0x7fff)), 13), f32x4.splat(reinterpret<f32>(0x77800000)));
  return v128.or(mag, i32x4.shl(v128.and(h, i32x4.splat(0x8000)), 16));
}

// @ts-ignore: decorator
@inline function loadS(type: i32, p: usize): f32 {
  if (type == 0) return load<f32>(p);
  const h = <u32>load<u16>(p);
  if (type == 30) return reinterpret<f32>(h << 16);
  const v = reinterpret<f32>((h & 0x7fff) << 13) * reinterpret<f32>(0x77800000);
  return (h & 0x8000) != 0 ? -v : v;
}

/** type: 0 F32, 1 F16, 30 BF16. */
export function mm_float(type: i32, w: usize, cols: i32, x: usize, n: i32, y: usize, ystride: i32, tiles: i32, tid: i32, nt: i32): void {
  const es: usize = type == 0 ? 4 : 2;
  const rowBytes = <usize>cols * es;
  const t0 = part(tiles, tid, nt);
  const t1 = part(tiles, tid + 1, nt);
  const c4 = cols & ~3;
  for (let tile = t0; tile < t1; tile++) {
    const w0 = w + <usize>tile * 4 * rowBytes;
    for (let t = 0; t < n; t++) {
      const xt = x + <usize>t * cols * 4;
      let a0 = f32x4.splat(0);
      let a1 = f32x4.splat(0);
      let a2 = f32x4.splat(0);
      let a3 = f32x4.splat(0);
      for (let c = 0; c < c4; c += 4) {
        const xv = v128.load(xt + (<usize>c << 2));
        const wc = w0 + <usize>c * es;
        a0 = f32x4.add(a0, f32x4.mul(loadW(type, wc), xv));
        a1 = f32x4.add(a1, f32x4.mul(loadW(type, wc + rowBytes), xv));
        a2 = f32x4.add(a2, f32x4.mul(loadW(type, wc + 2 * rowBytes), xv));
        a3 = f32x4.add(a3, f32x4.mul(loadW(type, wc + 3 * rowBytes), xv));
      }
      let acc = hsum4f(a0, a1, a2, a3);
      const yt = y + ((<usize>t * ystride + tile * 4) << 2);
      v128.store(yt, acc);
      for (let c = c4; c < cols; c++) {
        const xv = load<f32>(xt + (<usize>c << 2));
        const wc = w0 + <usize>c * es;
        for (let r = 0; r < 4; r++) store<f32>(yt + (r << 2), load<f32>(yt + (r << 2)) + loadS(type, wc + <usize>r * rowBytes) * xv);
      }
    }
  }
}
