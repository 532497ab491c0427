/**
 * A 512-bit fingerprint of a Float32Array's bits, for checking that data-parallel ranks hold
 * the same weights after an update: 16 lanes of MurmurHash3's 32-bit block step, element i
 * feeding lane i mod 16, each lane finalised with the element count (fmix32). It is not a
 * cryptographic hash: the peers are authenticated, and what it must catch is a bug. Each
 * lane's step is a bijection of its state for a fixed input word, so two arrays that differ in
 * one element always differ in that element's lane; other differences collide with odds of
 * about 2^-32 per lane, independently per lane.
 *
 * This is the twin ops-native.c's to_fingerprint is held to bit for bit (ranks with native
 * and TypeScript ops compare fingerprints), and the fallback where no native library loads.
 */
export const FINGERPRINT_LANES = 16;

const C1 = 0xcc9e2d51;
const C2 = 0x1b873593;

/** The lanes' starting states: lane j starts at SEED + j. */
const SEED = 0x9747b28c;

function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** Writes x's fingerprint into out (FINGERPRINT_LANES words). */
export function fingerprint(x: Float32Array, out: Uint32Array): void {
  const words = new Uint32Array(x.buffer, x.byteOffset, x.length);
  // lane by lane: each lane's state stays in a local
  for (let j = 0; j < FINGERPRINT_LANES; j++) {
    let h = SEED + j;
    for (let i = j; i < words.length; i += FINGERPRINT_LANES) {
      let k = Math.imul(words[i] as number, C1);
      k = Math.imul((k << 15) | (k >>> 17), C2);
      h ^= k;
      h = (Math.imul((h << 13) | (h >>> 19), 5) + 0xe6546b64) | 0;
    }
    out[j] = fmix32(h ^ words.length);
  }
}
