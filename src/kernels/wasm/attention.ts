// Causal grouped-query attention over a KV cache, one (token, head) pair per work item.
// q, out: [n, heads, hd] f32; k, v: [maxSeq, kvHeads, hd] (f32, or f16 bit patterns when
// f16 != 0); scores: per-thread scratch of `scratchStride` bytes. hd % 4 == 0.
import { part, f16 } from './common';

// @ts-ignore: decorator
@inline function roundF16v(v: v128): v128 {
  // round each lane to the nearest f16 value (normal range; activations stay far from f16 limits)
  const b = v128.and(v, i32x4.splat(0x7fffffff));
  const r = v128.and(i32x4.add(b, i32x4.add(i32x4.splat(0xfff), v128.and(i32x4.shr_u(b, 13), i32x4.splat(1)))), i32x4.splat(0xffffe000));
  const small = i32x4.lt_u(b, i32x4.splat(0x38800000));
  const sub = f32x4.div(f32x4.nearest(f32x4.mul(b, f32x4.splat(16777216.0))), f32x4.splat(16777216.0));
  return v128.or(v128.bitselect(sub, r, small), v128.and(v, i32x4.splat(0x80000000)));
}

// @ts-ignore: decorator
@inline function loadKV(p: usize, half: bool): v128 {
  if (!half) return v128.load(p);
  const h = v128.load16x4_u(p);
  const mag = f32x4.mul(i32x4.shl(v128.and(h, i32x4.splat(0x7fff)), 13), f32x4.splat(reinterpret<f32>(0x77800000)));
  return v128.or(mag, i32x4.shl(v128.and(h, i32x4.splat(0x8000)), 16));
}

export function attention(q: usize, k: usize, v: usize, out: usize, scratch: usize, scratchStride: i32, n: i32, heads: i32, kvHeads: i32, hd: i32, pos0: i32, scale: f32, half: i32, tid: i32, nt: i32): void {
  const group = heads / kvHeads;
  const es: usize = half ? 2 : 4;
  const rowStride = <usize>kvHeads * hd * es;
  const scores = scratch + <usize>tid * scratchStride;
  const items = n * heads;
  const i0 = part(items, tid, nt);
  const i1 = part(items, tid + 1, nt);
  const isHalf = half != 0;
  for (let item = i0; item < i1; item++) {
    const t = item / heads;
    const h = item % heads;
    const len = pos0 + t + 1;
    const qo = q + (<usize>item * hd << 2);
    const kvo = <usize>(h / group) * hd * es;
    let mx: f32 = -Infinity;
    for (let p = 0; p < len; p++) {
      const kp = k + <usize>p * rowStride + kvo;
      let acc = f32x4.splat(0);
      for (let i = 0; i < hd; i += 4) {
        let qv = v128.load(qo + (<usize>i << 2));
        if (isHalf) qv = roundF16v(qv);
        acc = f32x4.add(acc, f32x4.mul(qv, loadKV(kp + <usize>i * es, isHalf)));
      }
      const s2 = f32x4.add(acc, v128.shuffle<f32>(acc, acc, 2, 3, 0, 1));
      const s: f32 = (f32x4.extract_lane(s2, 0) + f32x4.extract_lane(s2, 1)) * scale;
      store<f32>(scores + (<usize>p << 2), s);
      mx = max<f32>(mx, s);
    }
    let sum: f64 = 0;
    for (let p = 0; p < len; p++) {
      const e = <f32>Math.exp(<f64>(load<f32>(scores + (<usize>p << 2)) - mx));
      store<f32>(scores + (<usize>p << 2), e);
      sum += e;
    }
    const inv = <f32>(1.0 / sum);
    const oo = out + (<usize>item * hd << 2);
    for (let i = 0; i < hd; i += 4) v128.store(oo + (<usize>i << 2), f32x4.splat(0));
    for (let p = 0; p < len; p++) {
      let pv = f32x4.splat(load<f32>(scores + (<usize>p << 2)) * inv);
      if (isHalf) pv = roundF16v(pv);
      const vp = v + <usize>p * rowStride + kvo;
      for (let i = 0; i < hd; i += 4) {
        const o = oo + (<usize>i << 2);
        v128.store(o, f32x4.add(v128.load(o), f32x4.mul(pv, loadKV(vp + <usize>i * es, isHalf))));
      }
    }
  }
}

/** Stores f32 values as f16 bit patterns (round to nearest even, normal range). */
export function store_f16(src: usize, dst: usize, count: i32): void {
  for (let i = 0; i < count; i++) {
    const r = reinterpret<u32>(load<f32>(src + (<usize>i << 2)));
    const sign = (r >> 16) & 0x8000;
    const a = r & 0x7fffffff;
    let h: u32;
    if (a >= 0x477ff000) h = 0x7c00;
    else if (a < 0x38800000) h = <u32>nearest<f32>(reinterpret<f32>(a) * <f32>16777216.0);
    else h = ((a + 0xfff + ((a >> 13) & 1)) >> 13) - (112 << 10);
    store<u16>(dst + (<usize>i << 1), <u16>(sign | h));
  }
}

/** Rounds f32 values in place to the nearest f16 (type 1) or bf16 (type 30) value. */
export function round_x(p: usize, count: i32, type: i32): void {
  for (let i = 0; i < count; i++) {
    const a = p + (<usize>i << 2);
    const r = reinterpret<u32>(load<f32>(a));
    if (type == 30) {
      if ((r & 0x7fffffff) > 0x7f800000) store<u32>(a, (r | 0x400000) & 0xffff0000);
      else store<u32>(a, (r + 0x7fff + ((r >> 16) & 1)) & 0xffff0000);
    } else {
      store<f32>(a, f32x4.extract_lane(roundF16v(v128.load32_zero(a)), 0));
    }
  }
}

/** out = silu(g) * u for count f32 elements, this thread's share (out may alias g). */
export function swiglu(g: usize, u: usize, out: usize, count: i32, tid: i32, nt: i32): void {
  for (let i = part(count, tid, nt); i < part(count, tid + 1, nt); i++) {
    const x = load<f32>(g + (<usize>i << 2));
    const s = <f32>(<f64>x / (1.0 + Math.exp(-<f64>x)));
    store<f32>(out + (<usize>i << 2), s * load<f32>(u + (<usize>i << 2)));
  }
}
