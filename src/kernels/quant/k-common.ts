import { nearestInt } from './rounding.js';

/** Shared pieces of the k-quants (QK_K = 256 super-blocks), following ggml's reference quantizers. */

export const GROUP_MAX_EPS = 1e-15;

// Scratch for makeQkx2Quants (n <= 32): values, weights and values minus the minimum, as doubles.
const xs = new Float64Array(32);
const ws = new Float64Array(32);
const xm = new Float64Array(32);

/**
 * Unpacks sub-block j's 6-bit scale and 6-bit min from the 12 packed bytes at `q[o..o+12)`:
 * sub-blocks 0-3 keep them in the low 6 bits of bytes j and j+4; 4-7 split them across the
 * low/high nibbles of byte j+4 and the top two bits of bytes j-4 and j.
 */
export function getScaleMinK4(j: number, q: Uint8Array, o: number, out: { sc: number; m: number }): void {
  if (j < 4) {
    out.sc = (q[o + j] as number) & 63;
    out.m = (q[o + j + 4] as number) & 63;
  } else {
    out.sc = ((q[o + j + 4] as number) & 0xf) | (((q[o + j - 4] as number) >>> 6) << 4);
    out.m = ((q[o + j + 4] as number) >>> 4) | (((q[o + j] as number) >>> 6) << 4);
  }
}

/** The inverse of getScaleMinK4: writes 8 (scale, min) pairs of 6 bits into 12 bytes at `q[o..o+12)`. */
export function packScalesMinsK4(ls: Uint8Array, lm: Uint8Array, q: Uint8Array, o: number): void {
  for (let i = 0; i < 12; i++) q[o + i] = 0;
  for (let j = 0; j < 8; j++) {
    const s = ls[j] as number;
    const m = lm[j] as number;
    if (j < 4) {
      q[o + j] = s;
      q[o + j + 4] = m;
    } else {
      q[o + j + 4] = (s & 0xf) | ((m & 0xf) << 4);
      q[o + j - 4] = (q[o + j - 4] as number) | ((s >>> 4) << 6);
      q[o + j] = (q[o + j] as number) | ((m >>> 4) << 6);
    }
  }
}

/**
 * Asymmetric quantization of n values to 0..nmax with x ~ scale*L - min, searching nstep
 * candidate scales around nmax/(max-min) for the lowest weighted squared error
 * (ggml's make_qkx2_quants with use_mad = false). Returns [scale, min] with min >= 0.
 */
export function makeQkx2Quants(
  n: number,
  nmax: number,
  x: Float32Array,
  x0: number,
  weights: Float32Array,
  L: Uint8Array,
  l0: number,
  Laux: Uint8Array,
  rmin: number,
  rdelta: number,
  nstep: number,
): [number, number] {
  let min = x[x0] as number;
  let max = min;
  let sumW = 0;
  let sumX = 0;
  let sumX2 = 0;
  for (let i = 0; i < n; i++) {
    const v = x[x0 + i] as number;
    if (v < min) min = v;
    if (v > max) max = v;
    const w = weights[i] as number;
    xs[i] = v;
    ws[i] = w;
    sumW += w;
    sumX += w * v;
    sumX2 += w * v * v;
  }
  if (min > 0) min = 0;
  if (max === min) {
    for (let i = 0; i < n; i++) L[l0 + i] = 0;
    return [0, -min];
  }
  for (let i = 0; i < n; i++) xm[i] = (xs[i] as number) - min;
  let iscale = nmax / (max - min);
  let scale = 1 / iscale;
  let bestError = 0;
  for (let i = 0; i < n; i++) {
    const l = Math.max(0, Math.min(nmax, nearestInt(iscale * (xm[i] as number))));
    L[l0 + i] = l;
    const diff = scale * l + min - (xs[i] as number);
    bestError += (ws[i] as number) * diff * diff;
  }
  const range = max - min;
  for (let is = 0; is <= nstep; is++) {
    iscale = (rmin + rdelta * is + nmax) / range;
    let sumL = 0;
    let sumL2 = 0;
    let sumXL = 0;
    for (let i = 0; i < n; i++) {
      // Round half to even by the 1.5 * 2^52 trick (nearestInt, inlined for this hot loop).
      let l = iscale * (xm[i] as number) + 6755399441055744 - 6755399441055744;
      l = l < 0 ? 0 : l > nmax ? nmax : l;
      Laux[i] = l;
      const wl = (ws[i] as number) * l;
      sumL += wl;
      sumL2 += wl * l;
      sumXL += wl * (xs[i] as number);
    }
    const D = sumW * sumL2 - sumL * sumL;
    if (D <= 0) continue;
    let thisScale = (sumW * sumXL - sumX * sumL) / D;
    let thisMin = (sumL2 * sumX - sumL * sumXL) / D;
    if (thisMin > 0) {
      thisMin = 0;
      thisScale = sumXL / sumL2;
    }
    // sum w (s*l + m - x)^2 expanded over the sums above: no second pass over the values.
    const curError =
      thisScale * thisScale * sumL2 +
      2 * thisScale * thisMin * sumL -
      2 * thisScale * sumXL +
      thisMin * thisMin * sumW -
      2 * thisMin * sumX +
      sumX2;
    if (curError < bestError) {
      for (let i = 0; i < n; i++) L[l0 + i] = Laux[i] as number;
      bestError = curError;
      scale = thisScale;
      min = thisMin;
    }
  }
  return [scale, -min];
}

/**
 * Symmetric quantization of n values to -nmax..nmax-1 (stored as L + nmax), weighted by x^2,
 * trying 18 scales around -nmax/max (ggml's make_qx_quants with rmse_type = 1).
 * Returns the scale (x ~ scale * (L - nmax)).
 */
export function makeQxQuants(
  n: number,
  nmax: number,
  x: Float32Array,
  x0: number,
  L: Uint8Array,
  l0: number,
): number {
  let max = 0;
  let amax = 0;
  for (let i = 0; i < n; i++) {
    const v = x[x0 + i] as number;
    const a = Math.abs(v);
    if (a > amax) {
      amax = a;
      max = v;
    }
  }
  if (amax < GROUP_MAX_EPS) {
    for (let i = 0; i < n; i++) L[l0 + i] = 0;
    return 0;
  }
  let iscale = -nmax / max;
  let sumLX = 0;
  let sumL2 = 0;
  for (let i = 0; i < n; i++) {
    const v = x[x0 + i] as number;
    const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(iscale * v)));
    L[l0 + i] = l + nmax;
    const w = v * v;
    sumLX += w * v * l;
    sumL2 += w * l * l;
  }
  let scale = sumL2 ? sumLX / sumL2 : 0;
  let best = scale * sumLX;
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    iscale = -(nmax + 0.1 * is) / max;
    sumLX = 0;
    sumL2 = 0;
    for (let i = 0; i < n; i++) {
      const v = x[x0 + i] as number;
      const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(iscale * v)));
      const w = v * v;
      sumLX += w * v * l;
      sumL2 += w * l * l;
    }
    if (sumL2 > 0 && sumLX * sumLX > best * sumL2) {
      for (let i = 0; i < n; i++) {
        const v = x[x0 + i] as number;
        L[l0 + i] = nmax + Math.max(-nmax, Math.min(nmax - 1, nearestInt(iscale * v)));
      }
      scale = sumLX / sumL2;
      best = scale * sumLX;
    }
  }
  return scale;
}
