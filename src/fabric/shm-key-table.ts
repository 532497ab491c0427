import { SHM_KEY_SLOT_BYTES as SLOT_BYTES, SHM_KEY_SLOTS as KEY_SLOTS } from './footprint.js';

/**
 * The shm key table: one shared segment per device, written by the device when it registers
 * an `allocate`d region (which lives in its own segment) and read by its peers, which validate
 * and place writes into that region themselves. KEY_SLOTS slots of SLOT_BYTES, open
 * addressing from `rkey % KEY_SLOTS`. A slot, as i32s:
 *   0 state (SlotState) | 1 rkey | 2 pd id | 3 access | 4 addrHi | 5 addrLo | 6 length |
 *   7 name length; bytes 32.. the region's segment name (latin1)
 * The owner writes every field, then stores the state LIVE last (Atomics), so a reader that
 * loads LIVE sees the whole entry; a reader re-checks the state after using an entry, since
 * the owner may remove it at any time.
 */
export const SHM_KEY_TABLE_BYTES = KEY_SLOTS * SLOT_BYTES;

export const SlotState = { EMPTY: 0, LIVE: 1, REMOVED: 2 } as const;

const SLOT_I32 = SLOT_BYTES / 4;
const STATE = 0;
const RKEY = 1;
const PD = 2;
const ACCESS = 3;
const ADDR_HI = 4;
const ADDR_LO = 5;
const LENGTH = 6;
const NAME_LENGTH = 7;
/** Byte offset of the name in a slot, and the longest name kept. */
const NAME_AT = 32;
const NAME_MAX = SLOT_BYTES - NAME_AT;

/** What a slot records of a registered region. */
export interface PublishedRegion {
  rkey: number;
  pdId: number;
  access: number;
  addrHi: number;
  addrLo: number;
  length: number;
}

/** A key table over a mapped segment of SHM_KEY_TABLE_BYTES: the owner's or a peer's. */
export class ShmKeyTable {
  private readonly i32: Int32Array;
  private readonly bytes: Uint8Array;

  constructor(buffer: ArrayBufferLike) {
    this.i32 = new Int32Array(buffer, 0, SHM_KEY_TABLE_BYTES / 4);
    this.bytes = new Uint8Array(buffer, 0, SHM_KEY_TABLE_BYTES);
  }

  /** Owner: puts a region in the table; its slot, or -1 when the table is full. */
  publish(r: PublishedRegion, name: string): number {
    const k = this.i32;
    for (let i = 0, slot = r.rkey % KEY_SLOTS; i < KEY_SLOTS; i++, slot = (slot + 1) % KEY_SLOTS) {
      const base = slot * SLOT_I32;
      if (Atomics.load(k, base + STATE) === SlotState.LIVE) continue;
      k[base + RKEY] = r.rkey | 0;
      k[base + PD] = r.pdId;
      k[base + ACCESS] = r.access;
      k[base + ADDR_HI] = r.addrHi;
      k[base + ADDR_LO] = r.addrLo | 0;
      k[base + LENGTH] = r.length;
      const bytes = Buffer.from(name, 'latin1');
      k[base + NAME_LENGTH] = bytes.length;
      this.bytes.set(bytes.subarray(0, NAME_MAX), base * 4 + NAME_AT);
      Atomics.store(k, base + STATE, SlotState.LIVE);
      return slot;
    }
    return -1;
  }

  /** Owner: the region of `slot` is gone; peers stop placing into it. */
  remove(slot: number): void {
    Atomics.store(this.i32, slot * SLOT_I32 + STATE, SlotState.REMOVED);
  }

  /** Reader: the slot of `rkey`'s live entry, or -1. */
  find(rkey: number): number {
    const k = this.i32;
    for (let i = 0, slot = rkey % KEY_SLOTS; i < KEY_SLOTS; i++, slot = (slot + 1) % KEY_SLOTS) {
      const base = slot * SLOT_I32;
      const state = Atomics.load(k, base + STATE);
      if (state === SlotState.EMPTY) return -1;
      if (state === SlotState.LIVE && k[base + RKEY] === (rkey | 0)) return slot;
    }
    return -1;
  }

  live(slot: number): boolean {
    return Atomics.load(this.i32, slot * SLOT_I32 + STATE) === SlotState.LIVE;
  }

  /** The remote key, as an i32 (compare with `rkey | 0`). */
  rkey(slot: number): number {
    return this.i32[slot * SLOT_I32 + RKEY] as number;
  }

  pdId(slot: number): number {
    return this.i32[slot * SLOT_I32 + PD] as number;
  }

  access(slot: number): number {
    return this.i32[slot * SLOT_I32 + ACCESS] as number;
  }

  /** High half of the region's address, as an i32 (`>>> 0` for the unsigned value). */
  addrHi(slot: number): number {
    return this.i32[slot * SLOT_I32 + ADDR_HI] as number;
  }

  /** Low half of the region's address, as an i32 (`>>> 0` for the unsigned value). */
  addrLo(slot: number): number {
    return this.i32[slot * SLOT_I32 + ADDR_LO] as number;
  }

  length(slot: number): number {
    return this.i32[slot * SLOT_I32 + LENGTH] as number;
  }

  /** The name of the segment the region lives in. */
  name(slot: number): string {
    const at = slot * SLOT_BYTES + NAME_AT;
    const n = this.i32[slot * SLOT_I32 + NAME_LENGTH] as number;
    return Buffer.from(this.bytes.subarray(at, at + n)).toString('latin1');
  }
}
