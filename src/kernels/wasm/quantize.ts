// Activation quantisation exactly as llama.cpp's CPU backend does it before a dot product.
// Output for every scheme: x16 [n, cols] i16 quants, xd [n, cols/B] f32 block scales,
// xs [n, cols/32] i32 sums of the quants of each 32-element group.

/** f32 -> nearest f16 value (round to nearest even), as f32. */
function roundF16(x: f32): f32 {
  const bits = reinterpret<u32>(x);
  const sign = bits & 0x80000000;
  const ax = reinterpret<f32>(bits & 0x7fffffff);
  if (ax >= <f32>65520.0) return reinterpret<f32>(sign | 0x7f800000);
  if (ax < reinterpret<f32>(0x38800000)) {
    // below the smallest normal f16 (2^-14): quantise to multiples of 2^-24
    const q = nearest<f32>(ax * <f32>16777216.0) / <f32>16777216.0;
    return reinterpret<f32>(sign | reinterpret<u32>(q));
  }
  // keep 10 mantissa bits, round to nearest even
  const b = bits & 0x7fffffff;
  const r = (b + 0xfff + ((b >> 13) & 1)) & 0xffffe000;
  return reinterpret<f32>(sign | r);
}

// x: [n, cols] f32
export function quant_q8_0(x: usize, n: i32, cols: i32, x16: usize, xd: usize, xs: usize): void {
  const nb = cols >> 5;
  for (let t = 0; t < n; t++) {
    for (let b = 0; b < nb; b++) {
      const p = x + ((<usize>t * cols + (b << 5)) << 2);
      let m = f32x4.splat(0);
      for (let i = 0; i < 32; i += 4) m = f32x4.max(m, f32x4.abs(v128.load(p + (i << 2))));
      m = f32x4.max(m, v128.shuffle<f32>(m, m, 2, 3, 0, 1));
      const amax = max<f32>(f32x4.extract_lane(m, 0), f32x4.extract_lane(m, 1));
      const d = roundF16(amax / <f32>127.0);
      const id = amax != 0 ? <f32>127.0 / amax : <f32>0.0;
      const vid = f32x4.splat(id);
      const q = x16 + ((<usize>t * cols + (b << 5)) << 1);
      let s = i32x4.splat(0);
      for (let i = 0; i < 32; i += 8) {
        const a = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p + (i << 2)), vid)));
        const c = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p + ((i + 4) << 2)), vid)));
        s = i32x4.add(s, i32x4.add(a, c));
        v128.store(q + (i << 1), i16x8.narrow_i32x4_s(a, c));
      }
      store<f32>(xd + ((<usize>t * nb + b) << 2), d);
      s = i32x4.add(s, v128.shuffle<i32>(s, s, 2, 3, 0, 1));
      store<i32>(xs + ((<usize>t * nb + b) << 2), i32x4.extract_lane(s, 0) + i32x4.extract_lane(s, 1));
    }
  }
}

// x: [n, cols] f32; blocks of 256 with iscale = -127 / (the element of largest magnitude)
export function quant_q8_k(x: usize, n: i32, cols: i32, x16: usize, xd: usize, xs: usize): void {
  const nb = cols >> 8;
  const ng = cols >> 5;
  for (let t = 0; t < n; t++) {
    for (let b = 0; b < nb; b++) {
      const p = x + ((<usize>t * cols + (b << 8)) << 2);
      let amax: f32 = 0;
      let mx: f32 = 0;
      for (let i = 0; i < 256; i++) {
        const v = load<f32>(p + (i << 2));
        const a = abs<f32>(v);
        if (a > amax) {
          amax = a;
          mx = v;
        }
      }
      const q = x16 + ((<usize>t * cols + (b << 8)) << 1);
      if (amax == 0) {
        memory.fill(q, 0, 512);
        store<f32>(xd + ((<usize>t * nb + b) << 2), 0);
        for (let g = 0; g < 8; g++) store<i32>(xs + ((<usize>t * ng + (b << 3) + g) << 2), 0);
        continue;
      }
      const iscale: f32 = <f32>-127.0 / mx;
      const vis = f32x4.splat(iscale);
      const top = i32x4.splat(127);
      for (let g = 0; g < 8; g++) {
        let s = i32x4.splat(0);
        for (let i = g << 5; i < (g << 5) + 32; i += 8) {
          const a = i32x4.min_s(i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p + (i << 2)), vis))), top);
          const c = i32x4.min_s(i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p + ((i + 4) << 2)), vis))), top);
          s = i32x4.add(s, i32x4.add(a, c));
          v128.store(q + (i << 1), i16x8.narrow_i32x4_s(a, c));
        }
        s = i32x4.add(s, v128.shuffle<i32>(s, s, 2, 3, 0, 1));
        store<i32>(xs + ((<usize>t * ng + (b << 3) + g) << 2), i32x4.extract_lane(s, 0) + i32x4.extract_lane(s, 1));
      }
      store<f32>(xd + ((<usize>t * nb + b) << 2), <f32>1.0 / iscale);
    }
  }
}

/** Thread tid's share of tokens of quant_q8_0 (kind 0) or quant_q8_k (kind 1), for prefill. */
export function quant_part(kind: i32, x: usize, n: i32, cols: i32, x16: usize, xd: usize, xs: usize, tid: i32, nt: i32): void {
  const t0 = <i32>((<i64>n * tid) / nt);
  const t1 = <i32>((<i64>n * (tid + 1)) / nt);
  if (t1 <= t0) return;
  const nd = kind == 0 ? cols >> 5 : cols >> 8;
  const ng = cols >> 5;
  const xo = x + (<usize>t0 * cols << 2);
  const qo = x16 + (<usize>t0 * cols << 1);
  const dO = xd + (<usize>t0 * nd << 2);
  const so = xs + (<usize>t0 * ng << 2);
  if (kind == 0) quant_q8_0(xo, t1 - t0, cols, qo, dO, so);
  else quant_q8_k(xo, t1 - t0, cols, qo, dO, so);
}
