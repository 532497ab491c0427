/** A growable little-endian byte buffer for writing headers (GGUF, safetensors, test fixtures). */
export class ByteBuilder {
  private buf = new Uint8Array(4096);
  private view = new DataView(this.buf.buffer);
  length = 0;

  private grow(n: number): number {
    const at = this.length;
    if (at + n > this.buf.length) {
      const next = new Uint8Array(Math.max(this.buf.length * 2, at + n));
      next.set(this.buf.subarray(0, at));
      this.buf = next;
      this.view = new DataView(next.buffer);
    }
    this.length += n;
    return at;
  }

  u8(v: number): this {
    this.view.setUint8(this.grow(1), v);
    return this;
  }
  i8(v: number): this {
    this.view.setInt8(this.grow(1), v);
    return this;
  }
  u16(v: number): this {
    this.view.setUint16(this.grow(2), v, true);
    return this;
  }
  i16(v: number): this {
    this.view.setInt16(this.grow(2), v, true);
    return this;
  }
  u32(v: number): this {
    this.view.setUint32(this.grow(4), v, true);
    return this;
  }
  i32(v: number): this {
    this.view.setInt32(this.grow(4), v, true);
    return this;
  }
  f32(v: number): this {
    this.view.setFloat32(this.grow(4), v, true);
    return this;
  }
  u64(v: number | bigint): this {
    this.view.setBigUint64(this.grow(8), BigInt(v), true);
    return this;
  }
  i64(v: number | bigint): this {
    this.view.setBigInt64(this.grow(8), BigInt(v), true);
    return this;
  }
  f64(v: number): this {
    this.view.setFloat64(this.grow(8), v, true);
    return this;
  }
  bytes(b: Uint8Array): this {
    this.buf.set(b, this.grow(b.length));
    return this;
  }
  /** A GGUF string: u64 byte length, then UTF-8 bytes (no NUL). */
  str(s: string): this {
    const b = Buffer.from(s, 'utf8');
    return this.u64(b.length).bytes(b);
  }
  /** Zero bytes up to a multiple of `alignment`. */
  pad(alignment: number): this {
    const n = (alignment - (this.length % alignment)) % alignment;
    this.grow(n);
    this.buf.fill(0, this.length - n, this.length);
    return this;
  }
  finish(): Uint8Array {
    return this.buf.slice(0, this.length);
  }
}
