import { TandemError } from '../errors/index.js';
import type {
  AccessFlags,
  MemoryRegion,
  PoolSlice,
  PoolStats,
  ProtectionDomain,
  RegistrationPool,
} from './types.js';

/** Smallest slice: 64 bytes (2^6), so slices are cache-line aligned inside their slab. */
const MIN_CLASS = 6;

/**
 * The registration pool of every provider: power-of-two size classes carved from large
 * regions (slabs) allocated on the domain, and a released slice reused by its class. A long
 * run then holds a few registrations however many buffers it uses, which matters where
 * registration is expensive or capped (real RDMA; ~100 regions per device on macOS).
 */
export class SlabPool implements RegistrationPool {
  private readonly free = new Map<number, { mr: MemoryRegion; offset: number }[]>();
  private readonly slabs: MemoryRegion[] = [];
  private current: MemoryRegion | undefined;
  private used = 0;
  private hits = 0;
  private misses = 0;
  private inUse = 0;

  constructor(
    private readonly pd: Pick<ProtectionDomain, 'allocate'>,
    private readonly access: AccessFlags,
    private readonly slabBytes: number,
  ) {}

  acquire(length: number): PoolSlice {
    if (!Number.isInteger(length) || length <= 0 || length >= 0x80000000) {
      throw new TandemError('FABRIC_INVALID_REQUEST', `pool.acquire: length ${length} is not in 1..2^31-1`, {
        hint: 'ask for a positive length below 2 GiB',
      });
    }
    const cls = Math.max(MIN_CLASS, Math.ceil(Math.log2(length)));
    const size = 2 ** cls;
    const reused = this.free.get(cls)?.pop();
    let mr: MemoryRegion;
    let offset: number;
    if (reused) {
      ({ mr, offset } = reused);
      this.hits++;
    } else {
      if (this.current === undefined || this.used + size > this.current.length) {
        this.current = this.pd.allocate(Math.max(size, this.slabBytes), this.access);
        this.slabs.push(this.current);
        this.used = 0;
        this.misses++;
      } else {
        this.hits++;
      }
      mr = this.current;
      offset = this.used;
      this.used += size;
    }
    this.inUse++;
    return this.slice(mr, offset, length, cls);
  }

  private slice(mr: MemoryRegion, offset: number, length: number, cls: number): PoolSlice {
    let released = false;
    return {
      mr,
      offset,
      length,
      view: mr.buffer.subarray(offset, offset + length),
      sge: (o = 0, l = length - o) => mr.sge(offset + o, l),
      remote: (o = 0) => mr.remote(offset + o),
      release: () => {
        if (released) return;
        released = true;
        this.inUse--;
        let list = this.free.get(cls);
        if (!list) this.free.set(cls, (list = []));
        list.push({ mr, offset });
      },
    };
  }

  stats(): PoolStats {
    return {
      hits: this.hits,
      misses: this.misses,
      regions: this.slabs.length,
      bytesRegistered: this.slabs.reduce((s, c) => s + c.length, 0),
      slicesInUse: this.inUse,
    };
  }

  close(): void {
    for (const c of this.slabs) c.deregister();
    this.slabs.length = 0;
    this.free.clear();
    this.current = undefined;
  }
}
