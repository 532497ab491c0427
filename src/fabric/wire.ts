/**
 * The frame format shared by every provider's data path (loopback, shm rings, tcp streams).
 *
 * On a stream each frame is `u32 LE bodyLength | body`; body layouts (little endian):
 *   common      0 type u8 | 1 flags u8 | 2 reserved u16 (0) | 4 psn u32
 *               (SEND and WRITE flags&8: the requester asks for an ACK at once, see FLAG_ACKREQ)
 *   SEND        8.. payload
 *   WRITE       8 rkey | 12 addrLo | 16 addrHi | 20 imm | 24.. payload   (flags&1: with imm;
 *               flags&4: placed by the requester in shared memory, 24 length u32 and no payload)
 *   READ_REQ    8 rkey | 12 addrLo | 16 addrHi | 20 length               (exactly 24 bytes)
 *   READ_RESP   8 status u8 | 9..11 0 | 12.. payload                     (psn = request's)
 *   ACK         8 status u8 | 9..11 0                                     (exactly 12 bytes)
 * A request's psn is the sender's next sequence number (random start); an ACK acknowledges
 * every request up to its psn; a non-success ACK (a NAK) fails that request.
 */
export const FrameType = { SEND: 1, WRITE: 2, READ_REQ: 3, READ_RESP: 4, ACK: 5 } as const;

export const FLAG_IMM = 1;
/** WRITE flag: the requester already placed the payload (shm); the body ends with u32 length at 24. */
export const FLAG_PLACED = 4;
/**
 * SEND/WRITE flag: acknowledge at once (InfiniBand's AckReq bit). The requester sets it on the
 * last frame of a signaled work request and on every ACK_EVERY-th frame otherwise; other
 * requests are acknowledged by the next cumulative ACK, or within the responder's next
 * timeout tick. An unsignaled request needs no completion, and each ACK costs both ends
 * (over shm, an 8 B ping-pong of unsignaled writes took 1.57-2.06 us per half round trip
 * with an ACK per write, 0.94-1.03 us with one per 64).
 */
export const FLAG_ACKREQ = 8;
/** The longest run of frames sent without FLAG_ACKREQ (bounds the requester's outstanding list). */
export const ACK_EVERY = 16;
export const SEND_HEADER = 8;
export const WRITE_HEADER = 24;
export const READ_REQ_BYTES = 24;
export const READ_RESP_HEADER = 12;
export const ACK_BYTES = 12;

/** Payload bytes per frame; larger writes, sends and reads are split. */
export const MAX_PAYLOAD = 4 << 20;
export const MAX_BODY = MAX_PAYLOAD + WRITE_HEADER;
/** WRITE frames above this are received straight into the target region when possible. */
const DIRECT_MIN = 64 * 1024;

/** Status codes on the wire; index into `wireStatus`. */
export const wireStatus = [
  'success',
  'remote_key',
  'remote_access',
  'remote_bounds',
  'remote_invalid',
] as const;
export type WireStatus = (typeof wireStatus)[number];
export const StatusCode: Record<WireStatus, number> = {
  success: 0,
  remote_key: 1,
  remote_access: 2,
  remote_bounds: 3,
  remote_invalid: 4,
};

export class MalformedFrame extends Error {}

/**
 * Splits a byte stream into frames, checking each length before buffering it. Whole frames
 * inside one chunk are handed out as views (no copy); the view is valid only during the call.
 */
export class FrameDecoder {
  private partial: Uint8Array | undefined;
  private filled = 0;
  private lenBuf = new Uint8Array(4);
  private lenFilled = 0;
  /** A large WRITE whose payload is received straight into the target region. */
  private direct: { head: Uint8Array; target: Uint8Array; filled: number } | undefined;

  /**
   * `place` may claim a large WRITE from its header (a validated view of the target, or
   * undefined for the normal path); `placed` then gets the header once the payload is in.
   */
  constructor(
    private readonly onFrame: (buf: Uint8Array, off: number, len: number) => void,
    private readonly place?: (head: Uint8Array, bodyLength: number) => Uint8Array | undefined,
    private readonly placed?: (head: Uint8Array) => void,
  ) {}

  /** Bytes `[start, end)` of `chunk` (default: all). Throws MalformedFrame on a length outside 8..MAX_BODY. */
  push(chunk: Uint8Array, start = 0, end = chunk.length): void {
    let pos = start;
    const n = end;
    while (pos < n) {
      const d = this.direct;
      if (d) {
        const take = Math.min(d.target.length - d.filled, n - pos);
        d.target.set(chunk.subarray(pos, pos + take), d.filled);
        d.filled += take;
        pos += take;
        if (d.filled === d.target.length) {
          this.direct = undefined;
          this.placed?.(d.head);
        }
        continue;
      }
      if (this.partial) {
        const take = Math.min(this.partial.length - this.filled, n - pos);
        this.partial.set(chunk.subarray(pos, pos + take), this.filled);
        this.filled += take;
        pos += take;
        if (this.filled === this.partial.length) {
          const body = this.partial;
          this.partial = undefined;
          this.onFrame(body, 0, body.length);
        }
        continue;
      }
      let len: number;
      if (this.lenFilled === 0 && n - pos >= 4) {
        len =
          (chunk[pos]! | (chunk[pos + 1]! << 8) | (chunk[pos + 2]! << 16) | (chunk[pos + 3]! << 24)) >>> 0;
        pos += 4;
      } else {
        while (this.lenFilled < 4 && pos < n) this.lenBuf[this.lenFilled++] = chunk[pos++]!;
        if (this.lenFilled < 4) return;
        const b = this.lenBuf;
        len = (b[0]! | (b[1]! << 8) | (b[2]! << 16) | (b[3]! << 24)) >>> 0;
        this.lenFilled = 0;
      }
      if (len < SEND_HEADER || len > MAX_BODY)
        throw new MalformedFrame(`frame length ${len} outside 8..${MAX_BODY}`);
      if (n - pos >= len) {
        this.onFrame(chunk, pos, len);
        pos += len;
      } else if (
        this.place &&
        len > DIRECT_MIN &&
        n - pos >= WRITE_HEADER &&
        chunk[pos] === FrameType.WRITE
      ) {
        const head = chunk.slice(pos, pos + WRITE_HEADER);
        const target = this.place(head, len);
        if (target) {
          this.direct = { head, target, filled: 0 };
          pos += WRITE_HEADER;
        } else {
          this.partial = new Uint8Array(len);
          this.filled = 0;
        }
      } else {
        this.partial = new Uint8Array(len);
        this.filled = 0;
      }
    }
  }

  /** The unfilled tail of a half-received frame: a reader may fill it directly, then advance(). */
  partialTarget(): Uint8Array | undefined {
    if (this.direct) return this.direct.target.subarray(this.direct.filled);
    return this.partial?.subarray(this.filled);
  }

  advance(n: number): void {
    const d = this.direct;
    if (d) {
      d.filled += n;
      if (d.filled === d.target.length) {
        this.direct = undefined;
        this.placed?.(d.head);
      }
      return;
    }
    const p = this.partial as Uint8Array;
    this.filled += n;
    if (this.filled === p.length) {
      this.partial = undefined;
      this.onFrame(p, 0, p.length);
    }
  }

  /** True while a frame is half received (a close now truncates it). */
  get midFrame(): boolean {
    return this.partial !== undefined || this.direct !== undefined || this.lenFilled > 0;
  }
}

export function putU32(b: Uint8Array, at: number, v: number): void {
  b[at] = v;
  b[at + 1] = v >>> 8;
  b[at + 2] = v >>> 16;
  b[at + 3] = v >>> 24;
}

export function getU32(b: Uint8Array, at: number): number {
  return (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16) | (b[at + 3]! << 24)) >>> 0;
}
