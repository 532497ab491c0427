import { AddressSplit, isU64 } from './address-split.js';
import type { Domain, Region } from './memory.js';
import type { DeviceStats, Sge } from './types.js';
import { Access } from './types.js';
import type { WireStatus } from './wire.js';

const TWO32 = 4294967296;

/**
 * The key checks of one queue pair's protection domain: local SGEs of posted work requests
 * (lkey) and the peer's one-sided requests (rkey). A check returns an offset in the region
 * and leaves the region in a field, so the hot path builds no result object.
 */
export class RegionCheck {
  /** The region local() resolved last (and looks at first: the next request is likely to name it again). */
  localRegion: Region | undefined;
  /** The region remote() validated last (and looks at first). */
  remoteRegion: Region | undefined;
  /** Splits a 64-bit address into u32 halves without BigInt arithmetic. */
  private readonly split = new AddressSplit();

  constructor(
    private readonly pd: Domain,
    private readonly stats: DeviceStats,
  ) {}

  /** An SGE's offset in its region (left in `localRegion`), or -1 when the key is dead, foreign, out of range or not writable. */
  local(sge: Sge, mustWrite: boolean): number {
    // the region of the last check first: a live region's key names no other live region
    let mr = this.localRegion;
    if (mr === undefined || mr.lkey !== sge.lkey || !mr.live) mr = this.pd.keys.byLkey.get(sge.lkey);
    if (mr === undefined || mr.pd !== this.pd || !mr.live) return -1;
    if (mustWrite && (mr.access & Access.LOCAL_WRITE) === 0) return -1;
    const a = sge.addr;
    if (typeof a !== 'bigint' || !isU64(a)) return -1;
    const split = this.split;
    split.split(a);
    const off = (split.hi - mr.addrHi) * TWO32 + (split.lo - mr.addrLo);
    const len = sge.length;
    if (!(off >= 0) || !Number.isInteger(len) || len < 0 || off + len > mr.length) return -1;
    this.localRegion = mr;
    return off;
  }

  /** Local SGEs to views; undefined when a key is dead, foreign, out of range or not writable. */
  localViews(sgl: readonly Sge[], mustWrite: boolean): Uint8Array[] | undefined {
    const out: Uint8Array[] = [];
    for (let i = 0; i < sgl.length; i++) {
      const sge = sgl[i] as Sge;
      const off = this.local(sge, mustWrite);
      if (off < 0) return undefined;
      out.push((this.localRegion as Region).buffer.subarray(off, off + sge.length));
    }
    return out;
  }

  /**
   * Validates a one-sided request of `len` bytes at (hi, lo) under `rkey` needing access
   * `flag`: the offset in the region (left in `remoteRegion`), or the refusal status (counted).
   */
  remote(rkey: number, lo: number, hi: number, len: number, flag: number): number | WireStatus {
    let mr = this.remoteRegion;
    if (mr === undefined || mr.rkey !== rkey || !mr.live) mr = this.pd.keys.byRkey.get(rkey);
    if (mr === undefined || mr.pd !== this.pd || !mr.live) {
      this.stats.rejectedKey++;
      return 'remote_key';
    }
    if ((mr.access & flag) === 0) {
      this.stats.rejectedAccess++;
      return 'remote_access';
    }
    const off = mr.offsetOf(hi, lo, len);
    if (off < 0) {
      this.stats.rejectedBounds++;
      return 'remote_bounds';
    }
    this.remoteRegion = mr;
    return off;
  }

  /** remote() for a large WRITE claimed before its payload arrives: a view of the target, or undefined (uncounted: the normal path judges it). */
  writeTarget(rkey: number, lo: number, hi: number, len: number): Uint8Array | undefined {
    const mr = this.pd.keys.byRkey.get(rkey);
    if (mr === undefined || mr.pd !== this.pd || !mr.live || (mr.access & Access.REMOTE_WRITE) === 0)
      return undefined;
    const off = mr.offsetOf(hi, lo, len);
    if (off < 0) return undefined;
    return mr.buffer.subarray(off, off + len);
  }
}
