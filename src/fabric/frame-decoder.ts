import { frameType } from './frame-header.js';
import { FrameType, MAX_BODY, SEND_HEADER, WRITE_HEADER } from './wire.js';

/** WRITE frames above this are received straight into the target region when possible. */
const DIRECT_MIN = 64 * 1024;

/** A frame whose length prefix is outside 8..MAX_BODY: the stream cannot be resynchronised. */
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
        frameType(chunk, pos) === FrameType.WRITE
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
