import { formatError, REGENERATE_HINT } from './format-error.js';
import type { ByteSource } from './byte-source.js';

const CHUNK = 1 << 20;
const decoder = new TextDecoder('utf-8');

/**
 * Sequential little-endian reads over a ByteSource through a bounded window (1 MiB, or one
 * value's size if larger). Every read first checks the bytes exist, so a length field can
 * never make it allocate more than the file holds; a short file is a typed error naming
 * the field being read.
 */
export class Cursor {
  pos = 0;
  private buf = new Uint8Array(0);
  private view = new DataView(this.buf.buffer);
  private bufStart = 0;

  constructor(readonly source: ByteSource) {}

  get remaining(): number {
    return this.source.size - this.pos;
  }

  /** Makes [pos, pos+n) available in the window; returns its index in `buf`. */
  private ensure(n: number, field: string): number {
    if (n > this.source.size - this.pos) {
      throw formatError(
        'MODEL_FORMAT_TRUNCATED',
        this.source.name,
        field,
        `needs ${n} bytes at offset ${this.pos} but the file ends at ${this.source.size}`,
        REGENERATE_HINT,
        { offset: this.pos, needed: n, size: this.source.size },
      );
    }
    const at = this.pos - this.bufStart;
    if (at >= 0 && at + n <= this.buf.length) return at;
    const len = Math.min(Math.max(CHUNK, n), this.source.size - this.pos);
    if (this.buf.length < len) {
      this.buf = new Uint8Array(len);
      this.view = new DataView(this.buf.buffer);
    }
    this.source.readInto(this.pos, len, this.buf);
    this.bufStart = this.pos;
    return 0;
  }

  u8(field: string): number {
    const at = this.ensure(1, field);
    this.pos += 1;
    return this.buf[at] as number;
  }
  i8(field: string): number {
    const at = this.ensure(1, field);
    this.pos += 1;
    return this.view.getInt8(at);
  }
  u16(field: string): number {
    const at = this.ensure(2, field);
    this.pos += 2;
    return this.view.getUint16(at, true);
  }
  i16(field: string): number {
    const at = this.ensure(2, field);
    this.pos += 2;
    return this.view.getInt16(at, true);
  }
  u32(field: string): number {
    const at = this.ensure(4, field);
    this.pos += 4;
    return this.view.getUint32(at, true);
  }
  i32(field: string): number {
    const at = this.ensure(4, field);
    this.pos += 4;
    return this.view.getInt32(at, true);
  }
  f32(field: string): number {
    const at = this.ensure(4, field);
    this.pos += 4;
    return this.view.getFloat32(at, true);
  }
  u64(field: string): bigint {
    const at = this.ensure(8, field);
    this.pos += 8;
    return this.view.getBigUint64(at, true);
  }
  i64(field: string): bigint {
    const at = this.ensure(8, field);
    this.pos += 8;
    return this.view.getBigInt64(at, true);
  }
  f64(field: string): number {
    const at = this.ensure(8, field);
    this.pos += 8;
    return this.view.getFloat64(at, true);
  }

  /** A copy of the next n bytes (n already checked against the file). */
  bytes(n: number, field: string): Uint8Array {
    const at = this.ensure(n, field);
    this.pos += n;
    return this.buf.slice(at, at + n);
  }

  /** UTF-8 text of the next n bytes. */
  text(n: number, field: string): string {
    const at = this.ensure(n, field);
    this.pos += n;
    return decoder.decode(this.buf.subarray(at, at + n));
  }

  /** Raw little-endian element bytes copied into a typed array's buffer. */
  into(target: Uint8Array, field: string): void {
    let done = 0;
    while (done < target.length) {
      const n = Math.min(CHUNK, target.length - done);
      const at = this.ensure(n, field);
      target.set(this.buf.subarray(at, at + n), done);
      this.pos += n;
      done += n;
    }
  }
}
