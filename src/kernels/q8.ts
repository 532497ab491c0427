import assert from 'node:assert/strict';

/**
 * The q8 wire format for f32 activations: values in blocks of 32, each block one f32 scale
 * (max |x| / 127) and 32 int8 quants q = round(x / scale), so x ~= q * scale.
 *
 * Layout of n values, nb = ceil(n / 32) blocks: [nb f32 scales][n int8 quants] (the last
 * block may be short; no padding). Size: 4 * nb + n bytes, about 28% of f32.
 * Error bound per value: |x - x~| <= scale / 2 = blockMaxAbs / 254 (0.394% of the block's
 * largest magnitude); non-finite inputs are not representable (a block holding one
 * decodes to NaN).
 */
export const q8BlockSize = 32;

export function q8Bytes(count: number): number {
  return 4 * Math.ceil(count / q8BlockSize) + count;
}

/** Quantize `src` into `out` (q8Bytes(src.length) bytes; out.byteOffset must be a multiple of 4). */
export function q8Pack(src: Float32Array, out: Uint8Array): void {
  const n = src.length;
  const nb = Math.ceil(n / q8BlockSize);
  assert.ok(out.byteLength >= 4 * nb + n, `q8Pack: output holds ${out.byteLength} bytes, need ${4 * nb + n}`);
  assert.ok(out.byteOffset % 4 === 0, 'q8Pack: output must be 4-byte aligned');
  const scales = new Float32Array(out.buffer, out.byteOffset, nb);
  const quants = new Int8Array(out.buffer, out.byteOffset + 4 * nb, n);
  for (let b = 0; b < nb; b++) {
    const lo = b * q8BlockSize;
    const hi = Math.min(n, lo + q8BlockSize);
    let max = 0;
    for (let i = lo; i < hi; i++) {
      const a = Math.abs(src[i] as number);
      if (!(a <= max)) max = a; // NaN sticks, so the block decodes to NaN instead of garbage
    }
    const scale = Math.fround(max / 127);
    scales[b] = scale;
    const inv = scale > 0 && Number.isFinite(scale) ? 1 / scale : 0;
    for (let i = lo; i < hi; i++) {
      const q = Math.round((src[i] as number) * inv);
      quants[i] = q > 127 ? 127 : q < -127 ? -127 : q;
    }
  }
}

function views(packed: Uint8Array, n: number): { scales: Float32Array; quants: Int8Array } {
  const nb = Math.ceil(n / q8BlockSize);
  assert.ok(
    packed.byteLength >= 4 * nb + n,
    `q8: packed holds ${packed.byteLength} bytes, need ${4 * nb + n}`,
  );
  assert.ok(packed.byteOffset % 4 === 0, 'q8: packed data must be 4-byte aligned');
  return {
    scales: new Float32Array(packed.buffer, packed.byteOffset, nb),
    quants: new Int8Array(packed.buffer, packed.byteOffset + 4 * nb, n),
  };
}

/** out[i] = q[i] * scale[i / 32] for the n = out.length values in `packed`. */
export function q8Unpack(packed: Uint8Array, out: Float32Array): void {
  const n = out.length;
  const { scales, quants } = views(packed, n);
  for (let i = 0; i < n; i++) out[i] = (quants[i] as number) * (scales[(i / q8BlockSize) | 0] as number);
}

/**
 * acc[i] += dequantized value i: the receive side of a q8 reduction, without a temporary.
 * The product is rounded to f32 first, so this equals q8Unpack followed by an f32 add.
 */
export function q8UnpackAdd(packed: Uint8Array, acc: Float32Array): void {
  const n = acc.length;
  const { scales, quants } = views(packed, n);
  for (let i = 0; i < n; i++)
    acc[i] =
      (acc[i] as number) + Math.fround((quants[i] as number) * (scales[(i / q8BlockSize) | 0] as number));
}
