/** Unread WRITE frames tracked by range; more than this and a direct write waits for all of them. */
const UNREAD_CAP = 64;

/**
 * The frames in the peer's ring that place data in its memory and that it has not read yet:
 * a direct write must not overtake one that touches the same bytes. WRITEs are known by key
 * and byte range, so a direct write waits only for those it overlaps (small control writes to
 * other bytes of a region do not hold back the large writes beside them). A SEND (it lands in whatever receive the peer posted) or a READ request is a barrier: no
 * direct write until the peer has read it. Stream positions are ring indices (mod 2^32).
 */
export class UnreadWrites {
  private readonly end = new Uint32Array(UNREAD_CAP);
  private readonly rkey = new Uint32Array(UNREAD_CAP);
  private readonly hi = new Uint32Array(UNREAD_CAP);
  private readonly lo = new Uint32Array(UNREAD_CAP);
  private readonly len = new Uint32Array(UNREAD_CAP);
  private head = 0;
  private count = 0;
  /** Stream position after the last barrier frame. */
  private barrierEnd: number;

  constructor(pos: number) {
    this.barrierEnd = pos;
  }

  /** A WRITE of `len` bytes at (hi, lo) under `rkey` ends at stream position `end`. */
  write(end: number, rkey: number, hi: number, lo: number, len: number): void {
    if (this.count === UNREAD_CAP) return this.barrier(end);
    const i = (this.head + this.count++) % UNREAD_CAP;
    this.end[i] = end;
    this.rkey[i] = rkey;
    this.hi[i] = hi;
    this.lo[i] = lo;
    this.len[i] = len;
  }

  barrier(end: number): void {
    this.barrierEnd = end;
  }

  /** Whether a direct write of `len` bytes at (hi, lo) under `rkey` may go now that the peer has read up to `read`. */
  allows(read: number, rkey: number, hi: number, lo: number, len: number): boolean {
    if (((read - this.barrierEnd) | 0) < 0) return false;
    while (this.count > 0 && ((read - (this.end[this.head] as number)) | 0) >= 0) {
      this.head = (this.head + 1) % UNREAD_CAP;
      this.count--;
    }
    for (let k = 0; k < this.count; k++) {
      const i = (this.head + k) % UNREAD_CAP;
      if (this.rkey[i] !== rkey) continue;
      const h = this.hi[i] as number;
      const l = this.lo[i] as number;
      const into = distance(h, l, hi, lo); // from the unread write's start to ours
      const back = distance(hi, lo, h, l);
      if ((into >= 0 && into < (this.len[i] as number)) || (back >= 0 && back < len)) return false;
    }
    return true;
  }
}

/**
 * (toHi, toLo) - (fromHi, fromLo) as 64-bit unsigned addresses, when it is below 2^32; else -1.
 * (Addresses are random 64-bit values: doubles would round them.)
 */
function distance(fromHi: number, fromLo: number, toHi: number, toLo: number): number {
  const borrow = toLo < fromLo ? 1 : 0;
  return (toHi - fromHi - borrow) >>> 0 === 0 ? (toLo - fromLo) >>> 0 : -1;
}
