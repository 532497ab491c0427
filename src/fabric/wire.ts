/**
 * The frame format shared by every provider's data path (loopback, shm rings, tcp streams):
 * frame types, flags, header sizes and wire status codes. On a stream each frame is
 * `u32 LE bodyLength | body` (frame-decoder.ts splits a stream); the body layouts and the
 * only code that writes or reads header fields are in frame-header.ts.
 */
export const FrameType = { SEND: 1, WRITE: 2, READ_REQ: 3, READ_RESP: 4, ACK: 5 } as const;

/** WRITE flag: the last frame of a write_imm; the header carries the immediate. */
export const FLAG_IMM = 1;
/** SEND flag: more fragments of the same message follow. */
export const FLAG_MORE = 2;
/** WRITE flag: the requester already placed the payload (shm); the body ends with u32 length at 24. */
export const FLAG_PLACED = 4;
/**
 * SEND/WRITE flag: acknowledge at once (InfiniBand's AckReq bit). The requester sets it on the
 * last frame of a signaled work request and on every ACK_EVERY-th frame otherwise; other
 * requests are acknowledged by the next cumulative ACK, or within the responder's next
 * timeout tick. An unsignaled request needs no completion, and each ACK costs both ends (it
 * crosses the ring behind the reply; docs/fabric.md has the measured cost).
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

export function putU32(b: Uint8Array, at: number, v: number): void {
  b[at] = v;
  b[at + 1] = v >>> 8;
  b[at + 2] = v >>> 16;
  b[at + 3] = v >>> 24;
}

export function getU32(b: Uint8Array, at: number): number {
  return (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16) | (b[at + 3]! << 24)) >>> 0;
}
