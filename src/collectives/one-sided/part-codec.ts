import { copyBytes } from '../../kernels/copy.js';
import { bytesOf } from '../../kernels/dtype.js';

/** A slot's bytes seen as f32 values, f16 bit patterns and bytes (built once per slot: nothing allocated per call). */
export interface SlotViews {
  f32: Float32Array;
  u16: Uint16Array;
  u8: Uint8Array;
}

/**
 * How a part travels in the direct exchange's slots: its owner encodes it once, and every
 * rank decodes the same bytes, so all ranks sum the same values. `exact`: the slot holds the
 * f32 values as they are, read in place and never decoded (exactF32); a rounding codec (the
 * tensor-parallel wire formats f16 and q8) is decoded into f32 before the sum.
 */
export interface PartCodec {
  readonly exact: boolean;
  /** Bytes the encoding of `count` values takes. */
  bytes(count: number): number;
  /** x's values into the slot. */
  encode(x: Float32Array, slot: SlotViews): void;
  /** The first into.length values out of the slot. */
  decode(slot: SlotViews, into: Float32Array): void;
}

/** f32 as is: the exchange's own format (its gathers) and the exact wire. */
export const exactF32: PartCodec = {
  exact: true,
  bytes: (count) => 4 * count,
  encode: (x, slot) => copyBytes(slot.u8, 0, bytesOf(x)),
  decode: (slot, into) => into.set(slot.f32.subarray(0, into.length)),
};
