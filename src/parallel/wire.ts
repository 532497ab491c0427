import { exactF32, type PartCodec } from '../collectives/index.js';
import { TandemError } from '../errors/index.js';
import { f16ToF32Table, f32ToF16 } from '../kernels/half.js';
import { q8Bytes, q8Pack, q8Unpack } from '../kernels/q8.js';

/** How activations travel: f32 exact; f16 half the bytes; q8 int8 with a scale per 32 values (~28%). */
export type WireFormat = 'f32' | 'f16' | 'q8';
export const wireFormats: readonly WireFormat[] = ['f32', 'f16', 'q8'];

export function checkWire(wire: string): WireFormat {
  if (!(wireFormats as readonly string[]).includes(wire)) {
    throw new TandemError('PAR_WIRE', `unknown wire format '${wire}'`, {
      hint: `use one of ${wireFormats.join(', ')}`,
    });
  }
  return wire as WireFormat;
}

/** Elements of the message that carries `count` f32 activations in `wire` format (Int32Array words for q8). */
export function wireLength(wire: WireFormat, count: number): number {
  if (wire === 'f32') return count;
  if (wire === 'f16') return count;
  return Math.ceil(q8Bytes(count) / 4);
}

/** The message array for `count` activations: Float32Array, Uint16Array (f16) or Int32Array (q8 bytes). */
export function wireBuffer(wire: WireFormat, count: number): Float32Array | Uint16Array | Int32Array {
  if (wire === 'f32') return new Float32Array(count);
  if (wire === 'f16') return new Uint16Array(count);
  return new Int32Array(wireLength(wire, count));
}

export function encodeWire(
  wire: WireFormat,
  x: Float32Array,
  out: Float32Array | Uint16Array | Int32Array,
): void {
  if (wire === 'f32') (out as Float32Array).set(x);
  else if (wire === 'f16')
    for (let i = 0; i < x.length; i++) (out as Uint16Array)[i] = f32ToF16(x[i] as number);
  else q8Pack(x, new Uint8Array(out.buffer, out.byteOffset, out.byteLength));
}

/** Decodes the first x.length activations of a message (a rank with fewer pieces than the most sends a shorter one). */
export function decodeWire(
  wire: WireFormat,
  msg: Float32Array | Uint16Array | Int32Array,
  x: Float32Array,
): void {
  if (wire === 'f32') x.set((msg as Float32Array).subarray(0, x.length));
  else if (wire === 'f16')
    for (let i = 0; i < x.length; i++) x[i] = f16ToF32Table[(msg as Uint16Array)[i] as number] as number;
  else q8Unpack(new Uint8Array(msg.buffer, msg.byteOffset, msg.byteLength), x);
}

/**
 * The wire formats as the direct exchange's part codecs (collectives' PartCodec): each part is
 * encoded once by its owner into its slot, and every rank decodes the same bytes.
 */
export const wireCodecs: Readonly<Record<WireFormat, PartCodec>> = {
  f32: exactF32,
  f16: {
    exact: false,
    bytes: (count) => 2 * count,
    encode: (x, slot) => {
      const u16 = slot.u16;
      for (let i = 0; i < x.length; i++) u16[i] = f32ToF16(x[i] as number);
    },
    decode: (slot, into) => {
      const u16 = slot.u16;
      for (let i = 0; i < into.length; i++) into[i] = f16ToF32Table[u16[i] as number] as number;
    },
  },
  q8: {
    exact: false,
    bytes: (count) => q8Bytes(count),
    encode: (x, slot) => q8Pack(x, slot.u8.subarray(0, q8Bytes(x.length))),
    decode: (slot, into) => q8Unpack(slot.u8.subarray(0, q8Bytes(into.length)), into),
  },
};
