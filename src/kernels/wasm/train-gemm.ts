// f32 GEMMs for training (forward and both backward products), on this module's own
// unshared memory: the host copies operands in at the byte offsets it chooses, grows the
// memory as needed, and copies the result out. Row-major throughout. `acc` != 0 adds to c.
//   nt: c[m, n] = a[m, k] . b[n, k]^T    (forward y = x W^T; a row dotted with b rows)
//   nn: c[m, n] = a[m, k] . b[k, n]      (dX = dY W)
//   tn: c[m, n] = a[k, m]^T . b[k, n]    (dW = dY^T X)
// Every sum over k runs in increasing k for each output, in f32, so a result does not depend
// on how the host batches calls; the lanes of a vector are separate outputs (nn, tn) or a
// fixed 4-way split of k that hsum adds in one order (nt).

// @ts-ignore: decorator
@inline function hsum(a: v128): f32 {
  const b = f32x4.add(a, v128.shuffle<f32>(a, a, 2, 3, 0, 1));
  return f32x4.extract_lane(b, 0) + f32x4.extract_lane(b, 1);
}

export function nt(a: usize, b: usize, c: usize, m: i32, n: i32, k: i32, acc: i32): void {
  const k4 = k & ~3;
  const rk = <usize>k << 2;
  for (let i = 0; i < m; i++) {
    const ai = a + <usize>i * rk;
    const ci = c + ((<usize>i * <usize>n) << 2);
    let j = 0;
    for (; j + 4 <= n; j += 4) {
      const b0 = b + <usize>j * rk;
      let s0 = f32x4.splat(0);
      let s1 = f32x4.splat(0);
      let s2 = f32x4.splat(0);
      let s3 = f32x4.splat(0);
      for (let p = 0; p < k4; p += 4) {
        const o = <usize>p << 2;
        const av = v128.load(ai + o);
        s0 = f32x4.add(s0, f32x4.mul(av, v128.load(b0 + o)));
        s1 = f32x4.add(s1, f32x4.mul(av, v128.load(b0 + rk + o)));
        s2 = f32x4.add(s2, f32x4.mul(av, v128.load(b0 + 2 * rk + o)));
        s3 = f32x4.add(s3, f32x4.mul(av, v128.load(b0 + 3 * rk + o)));
      }
      let r0 = hsum(s0);
      let r1 = hsum(s1);
      let r2 = hsum(s2);
      let r3 = hsum(s3);
      for (let p = k4; p < k; p++) {
        const x = load<f32>(ai + (<usize>p << 2));
        const o = <usize>p << 2;
        r0 += x * load<f32>(b0 + o);
        r1 += x * load<f32>(b0 + rk + o);
        r2 += x * load<f32>(b0 + 2 * rk + o);
        r3 += x * load<f32>(b0 + 3 * rk + o);
      }
      const cj = ci + (<usize>j << 2);
      if (acc != 0) {
        r0 += load<f32>(cj);
        r1 += load<f32>(cj + 4);
        r2 += load<f32>(cj + 8);
        r3 += load<f32>(cj + 12);
      }
      store<f32>(cj, r0);
      store<f32>(cj + 4, r1);
      store<f32>(cj + 8, r2);
      store<f32>(cj + 12, r3);
    }
    for (; j < n; j++) {
      const bj = b + <usize>j * rk;
      let s = f32x4.splat(0);
      for (let p = 0; p < k4; p += 4) {
        const o = <usize>p << 2;
        s = f32x4.add(s, f32x4.mul(v128.load(ai + o), v128.load(bj + o)));
      }
      let r = hsum(s);
      for (let p = k4; p < k; p++) r += load<f32>(ai + (<usize>p << 2)) * load<f32>(bj + (<usize>p << 2));
      const cj = ci + (<usize>j << 2);
      store<f32>(cj, acc != 0 ? load<f32>(cj) + r : r);
    }
  }
}

/** c rows [i0, i0 + 4) += sum over p of a(p, i) * b row p, a(p, i) at a + (p * as + i * ai) floats. */
// @ts-ignore: decorator
@inline function rows4(a: usize, as: usize, ai: usize, b: usize, c: usize, i0: i32, n: i32, k: i32): void {
  const n4 = n & ~3;
  const rn = <usize>n << 2;
  const c0 = c + <usize>i0 * rn;
  for (let p = 0; p < k; p++) {
    const ap = a + ((<usize>p * as + <usize>i0 * ai) << 2);
    const x0 = f32x4.splat(load<f32>(ap));
    const x1 = f32x4.splat(load<f32>(ap + (ai << 2)));
    const x2 = f32x4.splat(load<f32>(ap + (ai << 3)));
    const x3 = f32x4.splat(load<f32>(ap + ai * 12));
    const bp = b + <usize>p * rn;
    for (let j = 0; j < n4; j += 4) {
      const o = <usize>j << 2;
      const bv = v128.load(bp + o);
      v128.store(c0 + o, f32x4.add(v128.load(c0 + o), f32x4.mul(x0, bv)));
      v128.store(c0 + rn + o, f32x4.add(v128.load(c0 + rn + o), f32x4.mul(x1, bv)));
      v128.store(c0 + 2 * rn + o, f32x4.add(v128.load(c0 + 2 * rn + o), f32x4.mul(x2, bv)));
      v128.store(c0 + 3 * rn + o, f32x4.add(v128.load(c0 + 3 * rn + o), f32x4.mul(x3, bv)));
    }
    for (let j = n4; j < n; j++) {
      const o = <usize>j << 2;
      const bv = load<f32>(bp + o);
      store<f32>(c0 + o, load<f32>(c0 + o) + f32x4.extract_lane(x0, 0) * bv);
      store<f32>(c0 + rn + o, load<f32>(c0 + rn + o) + f32x4.extract_lane(x1, 0) * bv);
      store<f32>(c0 + 2 * rn + o, load<f32>(c0 + 2 * rn + o) + f32x4.extract_lane(x2, 0) * bv);
      store<f32>(c0 + 3 * rn + o, load<f32>(c0 + 3 * rn + o) + f32x4.extract_lane(x3, 0) * bv);
    }
  }
}

/** One c row i: += sum over p of a(p, i) * b row p. */
// @ts-ignore: decorator
@inline function row1(a: usize, as: usize, ai: usize, b: usize, c: usize, i: i32, n: i32, k: i32): void {
  const n4 = n & ~3;
  const rn = <usize>n << 2;
  const ci = c + <usize>i * rn;
  for (let p = 0; p < k; p++) {
    const s = load<f32>(a + ((<usize>p * as + <usize>i * ai) << 2));
    const x = f32x4.splat(s);
    const bp = b + <usize>p * rn;
    for (let j = 0; j < n4; j += 4) {
      const o = <usize>j << 2;
      v128.store(ci + o, f32x4.add(v128.load(ci + o), f32x4.mul(x, v128.load(bp + o))));
    }
    for (let j = n4; j < n; j++) {
      const o = <usize>j << 2;
      store<f32>(ci + o, load<f32>(ci + o) + s * load<f32>(bp + o));
    }
  }
}

/** c[m, n] (+)= sum over p of a(p, i) b[p, :], a(p, i) at a + (p * as + i * ai) floats. */
function outer(a: usize, as: usize, ai: usize, b: usize, c: usize, m: i32, n: i32, k: i32, acc: i32): void {
  if (acc == 0) memory.fill(c, 0, (<usize>m * <usize>n) << 2);
  let i = 0;
  for (; i + 4 <= m; i += 4) rows4(a, as, ai, b, c, i, n, k);
  for (; i < m; i++) row1(a, as, ai, b, c, i, n, k);
}

export function nn(a: usize, b: usize, c: usize, m: i32, n: i32, k: i32, acc: i32): void {
  outer(a, 1, <usize>k, b, c, m, n, k, acc);
}

export function tn(a: usize, b: usize, c: usize, m: i32, n: i32, k: i32, acc: i32): void {
  outer(a, <usize>m, 1, b, c, m, n, k, acc);
}
