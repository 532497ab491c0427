import { blockInfo } from '../ggml-blocks.js';
import { f32ToF16 } from '../half.js';
import { GgmlType, type GgmlTypeId } from '../types.js';

/** Deterministic PRNG (mulberry32) for kernel tests and benchmarks. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function randomFloats(n: number, seed: number, scale = 1): Float32Array {
  const r = rng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (r() * 2 - 1) * scale;
  return out;
}

function putF16(b: Uint8Array, o: number, v: number): void {
  const h = f32ToF16(v);
  b[o] = h & 0xff;
  b[o + 1] = h >> 8;
}

/**
 * Random but valid ggml bytes for a [rows, cols] tensor: every quant bit pattern is legal,
 * so quants are random bytes and only the f16/f32 scale fields are set to sane values.
 */
export function randomWeightBytes(type: GgmlTypeId, rows: number, cols: number, seed: number): Uint8Array {
  const r = rng(seed);
  const info = blockInfo[type];
  const blocks = (rows * cols) / info.elements;
  const b = new Uint8Array(blocks * info.bytes);
  for (let i = 0; i < b.length; i++) b[i] = Math.floor(r() * 256);
  const dv = new DataView(b.buffer);
  for (let k = 0; k < blocks; k++) {
    const o = k * info.bytes;
    switch (type) {
      case GgmlType.F32:
        dv.setFloat32(o, r() * 2 - 1, true);
        break;
      case GgmlType.F16:
        putF16(b, o, r() * 2 - 1);
        break;
      case GgmlType.BF16:
        b[o + 1] = r() < 0.5 ? 0x3f : 0xbf;
        break;
      case GgmlType.Q8_0:
      case GgmlType.Q4_0:
        putF16(b, o, (r() * 2 - 1) * 0.01);
        break;
      case GgmlType.Q4_K:
      case GgmlType.Q5_K:
        putF16(b, o, r() * 0.002);
        putF16(b, o + 2, r() * 0.002);
        break;
      case GgmlType.Q6_K:
        putF16(b, o + 208, (r() * 2 - 1) * 0.002);
        break;
    }
  }
  return b;
}
