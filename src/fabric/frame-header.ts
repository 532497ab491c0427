import { ACK_BYTES, FLAG_PLACED, FrameType, getU32, putU32, SEND_HEADER, WRITE_HEADER } from './wire.js';

/**
 * The frame header codec: every header field is written by HeaderWriter (a WRITE's also by
 * putWriteWords, as words) and read by the frame* functions below (a WRITE's also by
 * writeWords*), nowhere else. Body layouts (little endian; a stream puts
 * `u32 bodyLength` before each body, see wire.ts):
 *   common      0 type u8 | 1 flags u8 | 2 reserved u16 (0) | 4 psn u32
 *   SEND        8.. payload                                              (flags: MORE, ACKREQ)
 *   WRITE       8 rkey | 12 addrLo | 16 addrHi | 20 imm | 24.. payload   (flags: IMM, ACKREQ)
 *               with FLAG_PLACED: 24 length u32 and no payload (the requester placed it)
 *   READ_REQ    8 rkey | 12 addrLo | 16 addrHi | 20 length               (exactly 24 bytes)
 *   READ_RESP   8 status u8 | 9..11 0 | 12.. payload                     (psn = request's)
 *   ACK         8 status u8 | 9..11 0                                     (exactly 12 bytes)
 * A request's psn is the sender's next sequence number (random start); an ACK acknowledges
 * every request up to its psn; a non-success ACK (a NAK) fails that request.
 *
 * The reader functions take the body's buffer and offset (a view of a ring or a stream
 * chunk, parsed in place); the caller has checked that the body is long enough for the
 * field it reads. Nothing here allocates.
 */
const TYPE = 0;
const FLAGS = 1;
const RESERVED = 2;
const PSN = 4;
const RKEY = 8;
const ADDR_LO = 12;
const ADDR_HI = 16;
const IMM = 20;
const READ_LENGTH = 20;
const PLACED_LENGTH = 24;
const STATUS = 8;

/** A placed WRITE's body: the WRITE header and its u32 length. */
export const PLACED_WRITE_BYTES = WRITE_HEADER + 4;

export function frameType(b: Uint8Array, o: number): number {
  return b[o + TYPE] as number;
}

export function frameFlags(b: Uint8Array, o: number): number {
  return b[o + FLAGS] as number;
}

/** Whether the reserved u16 is 0, as every valid frame has it. */
export function frameReservedZero(b: Uint8Array, o: number): boolean {
  return b[o + RESERVED] === 0 && b[o + RESERVED + 1] === 0;
}

export function framePsn(b: Uint8Array, o: number): number {
  return getU32(b, o + PSN);
}

/** WRITE and READ_REQ: the target's remote key. */
export function frameRkey(b: Uint8Array, o: number): number {
  return getU32(b, o + RKEY);
}

/** WRITE and READ_REQ: low 32 bits of the target address. */
export function frameAddrLo(b: Uint8Array, o: number): number {
  return getU32(b, o + ADDR_LO);
}

/** WRITE and READ_REQ: high 32 bits of the target address. */
export function frameAddrHi(b: Uint8Array, o: number): number {
  return getU32(b, o + ADDR_HI);
}

/** WRITE: the immediate (0 without FLAG_IMM). */
export function frameImm(b: Uint8Array, o: number): number {
  return getU32(b, o + IMM);
}

/** READ_REQ: bytes to read. */
export function frameReadLength(b: Uint8Array, o: number): number {
  return getU32(b, o + READ_LENGTH);
}

/** WRITE with FLAG_PLACED: bytes the requester placed. */
export function framePlacedLength(b: Uint8Array, o: number): number {
  return getU32(b, o + PLACED_LENGTH);
}

/** ACK and READ_RESP: the status code (an index into wireStatus). */
export function frameStatus(b: Uint8Array, o: number): number {
  return b[o + STATUS] as number;
}

/**
 * Builds headers in one scratch buffer and returns a view of the header just written, valid
 * until the next call: every transport copies the header before send() returns, so one writer
 * per queue pair serves every frame it sends.
 */
export class HeaderWriter {
  private readonly scratch = new Uint8Array(PLACED_WRITE_BYTES);
  private readonly sendHead = this.scratch.subarray(0, SEND_HEADER);
  private readonly responseHead = this.scratch.subarray(0, ACK_BYTES);
  private readonly requestHead = this.scratch.subarray(0, WRITE_HEADER);
  private readonly placedHead = this.scratch.subarray(0, PLACED_WRITE_BYTES);

  send(flags: number, psn: number): Uint8Array {
    const h = this.sendHead;
    common(h, FrameType.SEND, flags, psn);
    return h;
  }

  write(flags: number, psn: number, rkey: number, addrLo: number, addrHi: number, imm: number): Uint8Array {
    const h = this.requestHead;
    common(h, FrameType.WRITE, flags, psn);
    target(h, rkey, addrLo, addrHi);
    putU32(h, IMM, imm);
    return h;
  }

  /** A WRITE whose `length` bytes the requester already placed (flags include FLAG_PLACED). */
  placedWrite(
    flags: number,
    psn: number,
    rkey: number,
    addrLo: number,
    addrHi: number,
    imm: number,
    length: number,
  ): Uint8Array {
    const h = this.placedHead;
    common(h, FrameType.WRITE, flags, psn);
    target(h, rkey, addrLo, addrHi);
    putU32(h, IMM, imm);
    putU32(h, PLACED_LENGTH, length);
    return h;
  }

  readRequest(psn: number, rkey: number, addrLo: number, addrHi: number, length: number): Uint8Array {
    const h = this.requestHead;
    common(h, FrameType.READ_REQ, 0, psn);
    target(h, rkey, addrLo, addrHi);
    putU32(h, READ_LENGTH, length);
    return h;
  }

  /** An ACK or a READ_RESP's header (the response's payload follows it) for `psn` with status `code`. */
  response(type: typeof FrameType.ACK | typeof FrameType.READ_RESP, psn: number, code: number): Uint8Array {
    const h = this.responseHead;
    common(h, type, 0, psn);
    h[STATUS] = code;
    h[STATUS + 1] = 0;
    h[STATUS + 2] = 0;
    h[STATUS + 3] = 0;
    return h;
  }
}

/** Whether this host stores words little endian, as the wire does (word writes below need it). */
export const WORDS_ARE_WIRE_ORDER = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/**
 * A WRITE frame's stream prefix (u32 body length) and header as 7 words at word index `at`
 * of `w`, for a body of `bodyLength` bytes: the same bytes as a length prefix plus
 * HeaderWriter.write(), in 7 stores instead of 28 (only where WORDS_ARE_WIRE_ORDER).
 */
export function putWriteWords(
  w: Int32Array,
  at: number,
  bodyLength: number,
  flags: number,
  psn: number,
  rkey: number,
  addrLo: number,
  addrHi: number,
  imm: number,
): void {
  w[at] = bodyLength;
  w[at + 1] = FrameType.WRITE | (flags << 8); // reserved u16 = 0
  w[at + 2] = psn;
  w[at + 3] = rkey;
  w[at + 4] = addrLo;
  w[at + 5] = addrHi;
  w[at + 6] = imm;
}

/**
 * The body length of a frame whose stream prefix is word `at` of `w` when that frame is a
 * WRITE without FLAG_PLACED and with its reserved bytes 0, else -1 (read it bytewise then).
 * Its fields are words at + 2 (psn), + 3 (rkey), + 4 (addrLo), + 5 (addrHi), + 6 (imm);
 * its flags, writeWordsFlags(). Only where WORDS_ARE_WIRE_ORDER.
 */
export function writeWordsLength(w: Int32Array, at: number): number {
  const head = w[at + 1] as number;
  if ((head & 0xffff00ff) !== FrameType.WRITE || (head & (FLAG_PLACED << 8)) !== 0) return -1;
  return (w[at] as number) >>> 0;
}

/** The flags of the WRITE whose stream prefix is word `at` of `w` (see writeWordsLength). */
export function writeWordsFlags(w: Int32Array, at: number): number {
  return ((w[at + 1] as number) >>> 8) & 0xff;
}

function common(h: Uint8Array, type: number, flags: number, psn: number): void {
  h[TYPE] = type;
  h[FLAGS] = flags;
  h[RESERVED] = 0;
  h[RESERVED + 1] = 0;
  putU32(h, PSN, psn);
}

function target(h: Uint8Array, rkey: number, addrLo: number, addrHi: number): void {
  putU32(h, RKEY, rkey);
  putU32(h, ADDR_LO, addrLo);
  putU32(h, ADDR_HI, addrHi);
}
