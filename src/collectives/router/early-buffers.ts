/**
 * Buffers for messages that arrive before their receive was posted (they wait whole in their
 * mailbox). Two sources, so that early messages bring no garbage of their own:
 *
 * - SPARE_MIN bytes or more: a few kept buffers (at most MAX_SPARES), each reused for a
 *   message of its size up to 4 times smaller. A fresh typed array of this size lives outside
 *   the V8 heap and is zero-filled; one per message costs more than the copy and brings
 *   collections of the whole heap.
 * - under SPARE_MIN bytes: views carved from a slab of SLAB_BYTES, each handed out once; a
 *   full slab is dropped and freed with its last view. A small typed array of its own would
 *   get an ArrayBuffer of its own once a kernel views its bytes as another type, and each dead
 *   one costs the next scavenge. keep() never keeps a slab: it takes only SPARE_MIN or more.
 */

export const SPARE_MIN = 1024;
export const MAX_SPARES = 8;
export const SLAB_BYTES = 64 * 1024;

export class EarlyBuffers {
  private readonly spares: Uint8Array[] = [];
  private slab = new Uint8Array(0);
  private slabUsed = 0;

  /** A buffer of `bytes` for an early message. */
  take(bytes: number): Uint8Array {
    if (bytes < SPARE_MIN) {
      let at = this.slabUsed;
      if (at + bytes > this.slab.byteLength) {
        this.slab = new Uint8Array(SLAB_BYTES);
        at = 0;
      }
      this.slabUsed = (at + bytes + 7) & ~7; // 8-byte aligned for any element type
      return this.slab.subarray(at, at + bytes);
    }
    const spares = this.spares;
    for (let i = 0; i < spares.length; i++) {
      const b = spares[i] as Uint8Array;
      if (b.byteLength < bytes || b.byteLength > 4 * bytes) continue;
      spares[i] = spares[spares.length - 1] as Uint8Array;
      spares.pop();
      return b.subarray(0, bytes);
    }
    return new Uint8Array(bytes);
  }

  /** Keeps a consumed early message's buffer for the next one (the caller keeps no view of it). */
  keep(payload: Uint8Array): void {
    if (payload.byteLength >= SPARE_MIN && this.spares.length < MAX_SPARES)
      this.spares.push(new Uint8Array(payload.buffer));
  }
}
