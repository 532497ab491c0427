/**
 * 64-bit addresses (bigint in the API) split into u32 halves on the hot path. A store into a
 * BigUint64Array and two u32 reads of its bytes cost a fraction of a DataView's
 * setBigUint64 as V8 compiles them (docs/fabric.md, "Measured facts"), and allocate nothing.
 */
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
const LO = LITTLE_ENDIAN ? 0 : 1;
const HI = 1 - LO;

/** One scratch word: split() an address, then read `hi` and `lo` (valid until the next split). */
export class AddressSplit {
  private readonly word = new BigUint64Array(1);
  private readonly halves = new Uint32Array(this.word.buffer);

  /** Splits `a` taken mod 2^64 (check the range first with isU64 where it matters). */
  split(a: bigint): void {
    this.word[0] = a;
  }

  get lo(): number {
    return this.halves[LO] as number;
  }

  get hi(): number {
    return this.halves[HI] as number;
  }
}

/** Whether `a` is a 64-bit unsigned address (0 .. 2^64-1). */
export function isU64(a: bigint): boolean {
  return BigInt.asUintN(64, a) === a;
}
