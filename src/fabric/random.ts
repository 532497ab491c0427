import { getRandomValues } from 'node:crypto';

/** Random 32-bit values from the OS CSPRNG, fetched in batches (a key per registration). */
const batch = new Uint32Array(1024);
let next = batch.length;

export function randomU32(): number {
  if (next === batch.length) {
    getRandomValues(batch);
    next = 0;
  }
  return batch[next++] as number;
}

/** A random non-zero 32-bit value not in `live`. */
export function freshKey(live: { has(key: number): boolean }): number {
  for (;;) {
    const key = randomU32();
    if (key !== 0 && !live.has(key)) return key;
  }
}
