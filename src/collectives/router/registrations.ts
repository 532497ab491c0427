import { Access, type MemoryRegion, type ProtectionDomain } from '../../fabric/types.js';

/** Caller buffers kept registered at most (RDMA hardware caps regions per device). */
export const MAX_REGISTERED = 16;

/** A registration of a caller's buffer, reused while the buffer comes back. */
export interface Registered {
  mr: MemoryRegion;
  /** Zero-copy fragments written from it and not completed yet: it is not evicted while any are. */
  inflight: number;
  /** The clock when it was last used (least recently used goes first). */
  used: number;
}

/**
 * The caller buffers registered for zero-copy sends, by ArrayBuffer: registered on first use
 * and kept while the buffer comes back (a gradient or activation buffer reused call after call
 * is registered once), at most MAX_REGISTERED, evicting the least recently used idle one.
 */
export class Registrations {
  private readonly regs = new Map<ArrayBufferLike, Registered>();
  private clock = 0;

  /** `pd` is undefined for a router without links (it then never sends). */
  constructor(private readonly pd: ProtectionDomain | undefined) {}

  get size(): number {
    return this.regs.size;
  }

  /**
   * The registration of the buffer under `bytes`, counted in flight; undefined when every kept
   * registration is in flight or registering fails (the fragment then goes by copy).
   */
  acquire(bytes: Uint8Array): Registered | undefined {
    const buffer = bytes.buffer;
    let r = this.regs.get(buffer);
    if (r === undefined) {
      if (this.regs.size >= MAX_REGISTERED && !this.evict()) return undefined;
      if (this.pd === undefined) return undefined;
      try {
        r = { mr: this.pd.register(new Uint8Array(buffer), Access.NONE), inflight: 0, used: 0 };
      } catch {
        return undefined;
      }
      this.regs.set(buffer, r);
    }
    r.used = ++this.clock;
    r.inflight++;
    return r;
  }

  /** A zero-copy fragment from `buffer` completed (or failed). */
  release(buffer: ArrayBufferLike): void {
    const r = this.regs.get(buffer);
    if (r) r.inflight--;
  }

  /** Deregisters every registration (the router closes). */
  clear(): void {
    for (const r of this.regs.values()) {
      try {
        r.mr.deregister();
      } catch {
        /* already gone with its device */
      }
    }
    this.regs.clear();
  }

  /** Drops the least recently used idle registration; false when all are in flight. */
  private evict(): boolean {
    let oldest: [ArrayBufferLike, Registered] | undefined;
    for (const e of this.regs)
      if (e[1].inflight === 0 && (oldest === undefined || e[1].used < oldest[1].used)) oldest = e;
    if (oldest === undefined) return false;
    this.regs.delete(oldest[0]);
    oldest[1].mr.deregister();
    return true;
  }
}
