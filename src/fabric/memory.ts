import { TandemError } from '../errors/index.js';
import { SlabPool } from './slab-pool.js';
import { freshKey, randomU32 } from './random.js';
import type {
  AccessFlags,
  Device,
  MemoryRegion,
  PoolOptions,
  ProtectionDomain,
  RegistrationPool,
  RemoteAddress,
  RemoteRegion,
  Sge,
} from './types.js';

const TWO32 = 4294967296;
const ALL_ACCESS = 7;

/** Live regions of one device, by remote and by local key. */
export class KeyTable {
  readonly byRkey = new Map<number, Region>();
  readonly byLkey = new Map<number, Region>();
  private nextPd = 1;

  newPdId(): number {
    return this.nextPd++;
  }
}

/**
 * A registered region. Its virtual base is random and page aligned, well below 2^64 so that
 * `addr + length` never wraps; responders compute offsets from the (hi, lo) halves without BigInt.
 */
export class Region implements MemoryRegion {
  readonly lkey: number;
  readonly rkey: number;
  readonly addr: bigint;
  readonly addrHi: number;
  readonly addrLo: number;
  readonly length: number;
  private isLive = true;

  constructor(
    readonly pd: Domain,
    readonly buffer: Uint8Array,
    readonly access: AccessFlags,
  ) {
    const keys = pd.keys;
    this.rkey = freshKey(keys.byRkey);
    this.lkey = freshKey(keys.byLkey);
    this.addrHi = 0x1000 + (randomU32() % 0x3fff0000);
    this.addrLo = (randomU32() & 0xfffff000) >>> 0;
    this.addr = (BigInt(this.addrHi) << 32n) | BigInt(this.addrLo);
    this.length = buffer.byteLength;
    keys.byRkey.set(this.rkey, this);
    keys.byLkey.set(this.lkey, this);
  }

  get live(): boolean {
    return this.isLive;
  }

  /** Offset of remote address (hi, lo) in this region, or -1 when `[addr, addr+len)` is not inside. */
  offsetOf(hi: number, lo: number, len: number): number {
    const off = (hi - this.addrHi) * TWO32 + (lo - this.addrLo);
    if (!(off >= 0) || len < 0 || len >= 0x80000000 || off + len > this.length) return -1;
    return off;
  }

  sge(offset = 0, length = this.length - offset): Sge {
    return { addr: this.addr + BigInt(offset), length, lkey: this.lkey };
  }

  remote(offset = 0): RemoteAddress {
    return { addr: this.addr + BigInt(offset), rkey: this.rkey };
  }

  describe(): RemoteRegion {
    return { addr: this.addr, rkey: this.rkey, length: this.length };
  }

  deregister(): void {
    if (!this.isLive) return;
    this.isLive = false;
    this.pd.keys.byRkey.delete(this.rkey);
    this.pd.keys.byLkey.delete(this.lkey);
    this.pd.onDeregister(this);
  }
}

export type Allocator = (length: number) => {
  buffer: Uint8Array;
  release(): void;
  registered?(region: Region): void;
};

export class Domain implements ProtectionDomain {
  readonly id: number;
  private readonly releases = new Map<Region, () => void>();

  constructor(
    readonly device: Device,
    readonly keys: KeyTable,
    private readonly allocator: Allocator,
  ) {
    this.id = keys.newPdId();
  }

  register(buffer: Uint8Array, access: AccessFlags): Region {
    if (!(buffer instanceof Uint8Array)) {
      throw new TandemError(
        'FABRIC_INVALID_REQUEST',
        `register: expected a Uint8Array, got ${typeof buffer}`,
        {
          hint: 'pass a Uint8Array (or a Buffer) view of the memory to register',
        },
      );
    }
    if (!Number.isInteger(access) || access < 0 || (access & ~ALL_ACCESS) !== 0) {
      throw new TandemError('FABRIC_INVALID_REQUEST', `register: unknown access flags ${access}`, {
        hint: 'combine Access.LOCAL_WRITE, Access.REMOTE_WRITE and Access.REMOTE_READ',
      });
    }
    if (this.keys.byRkey.size >= 0x40000000) {
      throw new TandemError('FABRIC_KEY_EXHAUSTED', `register: ${this.keys.byRkey.size} regions are live`, {
        hint: 'deregister regions or use a registration pool',
      });
    }
    return new Region(this, buffer, access);
  }

  allocate(length: number, access: AccessFlags): Region {
    if (!Number.isInteger(length) || length <= 0 || length >= 0x80000000) {
      throw new TandemError('FABRIC_INVALID_REQUEST', `allocate: length ${length} is not in 1..2^31-1`, {
        hint: 'allocate a positive length below 2 GiB; split larger buffers',
      });
    }
    const mem = this.allocator(length);
    const region = this.register(mem.buffer, access);
    mem.registered?.(region);
    this.releases.set(region, mem.release);
    return region;
  }

  onDeregister(region: Region): void {
    const release = this.releases.get(region);
    if (release) {
      this.releases.delete(region);
      release();
    }
  }

  createPool(options: PoolOptions = {}): RegistrationPool {
    return new SlabPool(this, options.access ?? ALL_ACCESS, options.chunkBytes ?? 16 << 20);
  }
}
