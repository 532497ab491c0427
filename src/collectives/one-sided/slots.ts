import type { RemoteAddress, SendWr, Sge } from '../../fabric/index.js';

/**
 * Registered slots per peer: the mechanism collectives' one-sided paths share (the board's
 * small all-reduces, the direct exchange of tensor-parallel groups). Every rank registers, for
 * every peer, two slots that only that peer writes. A call writes this rank's part straight
 * into its slot of the call's parity on every peer (one RDMA write each, unsignaled: no
 * message, receive or credit), then waits until every peer's slot of that parity holds the
 * call's part, and reads them in place.
 *
 * Two slots suffice: a peer can be at most one call ahead (it cannot finish call k + 1 before
 * this rank's part of k + 1 has arrived, which this rank writes only after it has read every
 * slot of call k), so the slot of parity k % 2 is free again when call k + 2 starts.
 *
 * How a rank sees its peers' slots filled differs by path and stays with it: the board polls
 * tags the write carries in the slot itself (over shm the bytes land without its help); the
 * exchange counts the write-with-immediate completions on its own completion queue.
 */

/** Two of a kind, indexed by parity (0, 1). */
export type Pair<T> = readonly [T, T];

/**
 * Where slots lie in a region: slot pair `index` at bytes [2 index slotBytes, (2 index + 2)
 * slotBytes), parity p at (2 index + p) slotBytes. The board's region holds one pair per
 * communicator rank (index = the writer's rank); an exchange inbox holds one pair (index 0).
 */
export class SlotLayout {
  constructor(readonly slotBytes: number) {}

  /** Byte offset of pair `index`'s parity-p slot. */
  offset(index: number, parity: number): number {
    return (2 * index + parity) * this.slotBytes;
  }

  /** Bytes of a region of `pairs` slot pairs. */
  regionBytes(pairs: number): number {
    return 2 * pairs * this.slotBytes;
  }

  /** Pair `index`'s two slots in `region` (a peer's region seen from here), whole. */
  local(region: Uint8Array, index: number): Pair<Uint8Array> {
    const at = (p: number): Uint8Array =>
      region.subarray(this.offset(index, p), this.offset(index, p) + this.slotBytes);
    return [at(0), at(1)];
  }

  /** Pair `index`'s two slots on a peer whose region starts at `base` with remote key `rkey`. */
  remote(base: bigint, rkey: number, index: number): Pair<RemoteAddress> {
    const at = (p: number): RemoteAddress => ({ addr: base + BigInt(this.offset(index, p)), rkey });
    return [at(0), at(1)];
  }
}

/**
 * The direct writes of one rank: per parity and peer one write request into this rank's slot
 * of that parity on the peer, built once and posted call after call, as verbs programs keep
 * theirs (the fabric reads a request only while it is posted). A call changes only its length
 * and, for writes with immediate, the immediate: nothing is allocated per call.
 */
export class SlotWrites {
  private readonly requests: Pair<(SendWr | undefined)[]>;

  /**
   * `build(r, p)`: the write (one SGE) of this rank's staged parity-p part to peer r's slot
   * (undefined for no write: this rank itself); `post(r, wr)` posts it to peer r.
   */
  constructor(
    peers: number,
    build: (peer: number, parity: number) => SendWr | undefined,
    private readonly post: (peer: number, wr: SendWr) => void,
  ) {
    const side = (p: number): (SendWr | undefined)[] => Array.from({ length: peers }, (_, r) => build(r, p));
    this.requests = [side(0), side(1)];
  }

  /** Writes the first `length` staged bytes of parity `parity` to every peer; `imm` for writes with immediate (also their wrId). */
  writeAll(parity: number, length: number, imm = 0): void {
    const wrs = this.requests[parity as 0 | 1];
    for (let r = 0; r < wrs.length; r++) {
      const wr = wrs[r];
      if (wr === undefined) continue;
      (wr.sgl[0] as Sge).length = length;
      if (wr.opcode === 'write_imm') wr.imm = wr.wrId = imm;
      this.post(r, wr);
    }
  }
}
