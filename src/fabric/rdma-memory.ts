import { TandemError } from '../errors/index.js';
import { AddressSplit } from './address-split.js';
import { SlabPool } from './slab-pool.js';
import type { RdmaPd } from './rdma-resources.js';
import { RdmaMr } from './rdma-resources.js';
import {
  Access,
  type AccessFlags,
  type Device,
  type MemoryRegion,
  type PoolOptions,
  type ProtectionDomain,
  type RegistrationPool,
  type RemoteAddress,
  type RemoteRegion,
  type Sge,
} from './types.js';

const TWO32 = 4294967296;
/** Splits addresses without allocating (hot path: every posted SGE is checked). */
const split = new AddressSplit();

/**
 * The rdma provider's protection domains and memory regions: each region is one ibv_reg_mr of
 * memory in this process (its keys and address are the device's and the process's own), and
 * the registration pool packs small buffers into large registered slabs, so that a long run
 * stays far below a device's region cap (max_mr; about 100 on Apple's Thunderbolt driver).
 */

const ALL_ACCESS = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ;

/** Regions this process holds registered, per verbs device name (what `tandem devinfo` shows as the use). */
const inUse = new Map<string, number>();

export function regionsInUse(device: string): number {
  return inUse.get(device) ?? 0;
}

/** Live regions of one device, by local key (work requests name memory by lkey). */
export class RdmaRegionTable {
  readonly byLkey = new Map<number, RdmaRegion>();
  /** Regions registered now, and the device's cap (max_mr). */
  get live(): number {
    return this.byLkey.size;
  }
  constructor(
    readonly device: string,
    readonly cap: number,
  ) {}

  add(r: RdmaRegion): void {
    this.byLkey.set(r.lkey, r);
    inUse.set(this.device, regionsInUse(this.device) + 1);
  }

  remove(r: RdmaRegion): void {
    if (this.byLkey.delete(r.lkey)) inUse.set(this.device, regionsInUse(this.device) - 1);
  }
}

export class RdmaRegion implements MemoryRegion {
  readonly lkey: number;
  readonly rkey: number;
  readonly addr: bigint;
  readonly length: number;
  /** `addr` as u32 halves, for offsetOf. */
  private readonly addrHi: number;
  private readonly addrLo: number;
  private isLive = true;

  constructor(
    readonly pd: RdmaDomain,
    readonly buffer: Uint8Array,
    readonly access: AccessFlags,
    private readonly mr: RdmaMr,
  ) {
    this.lkey = mr.lkey;
    this.rkey = mr.rkey;
    this.addr = mr.addr;
    split.split(mr.addr);
    this.addrHi = split.hi;
    this.addrLo = split.lo;
    this.length = buffer.byteLength;
  }

  get live(): boolean {
    return this.isLive;
  }

  /** Offset of `[addr, addr + length)` in this region, or -1 when it is not inside (no BigInt made). */
  offsetOf(addr: bigint, length: number): number {
    split.split(addr);
    const off = (split.hi - this.addrHi) * TWO32 + (split.lo - this.addrLo);
    if (!(off >= 0) || length < 0 || off + length > this.length) return -1;
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
    this.pd.table.remove(this);
    this.mr.deregister();
  }
}

export class RdmaDomain implements ProtectionDomain {
  private static nextId = 1;
  readonly id = RdmaDomain.nextId++;

  constructor(
    readonly device: Device,
    readonly pd: RdmaPd,
    readonly table: RdmaRegionTable,
  ) {}

  register(buffer: Uint8Array, access: AccessFlags): RdmaRegion {
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
    if (this.table.live >= this.table.cap) {
      throw new TandemError(
        'FABRIC_KEY_EXHAUSTED',
        `register: ${this.table.live} regions are live, the device allows ${this.table.cap}`,
        {
          hint: 'deregister regions or use a registration pool (pd.createPool), which packs buffers into slabs',
        },
      );
    }
    const region = new RdmaRegion(this, buffer, access, this.pd.register(buffer, access));
    this.table.add(region);
    return region;
  }

  allocate(length: number, access: AccessFlags): RdmaRegion {
    if (!Number.isInteger(length) || length <= 0 || length >= 0x80000000) {
      throw new TandemError('FABRIC_INVALID_REQUEST', `allocate: length ${length} is not in 1..2^31-1`, {
        hint: 'allocate a positive length below 2 GiB; split larger buffers',
      });
    }
    return this.register(new Uint8Array(length), access);
  }

  createPool(options: PoolOptions = {}): RegistrationPool {
    return new SlabPool(this, options.access ?? ALL_ACCESS, options.chunkBytes ?? 16 << 20);
  }
}
