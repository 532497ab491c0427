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
    const at = this.grow(1);
    this.view.setUint8(at, v);
    return this;
  }
  i8(v: number): this {
    const at = this.grow(1);
    this.view.setInt8(at, v);
    return this;
  }
  u16(v: number): this {
    const at = this.grow(2);
    this.view.setUint16(at, v, true);
    return this;
  }
  i16(v: number): this {
    const at = this.grow(2);
    this.view.setInt16(at, v, true);
    return this;
  }
  u32(v: number): this {
    const at = this.grow(4);
    this.view.setUint32(at, v, true);
    return this;
  }
  i32(v: number): this {
    const at = this.grow(4);
    this.view.setInt32(at, v, true);
    return this;
  }
  f32(v: number): this {
    const at = this.grow(4);
    this.view.setFloat32(at, v, true);
    return this;
  }
  u64(v: number | bigint): this {
    const at = this.grow(8);
    this.view.setBigUint64(at, BigInt(v), true);
    return this;
  }
  i64(v: number | bigint): this {
    const at = this.grow(8);
    this.view.setBigInt64(at, BigInt(v), true);
    return this;
  }
  f64(v: number): this {
    const at = this.grow(8);
    this.view.setFloat64(at, v, true);
    return this;
  }
  bytes(b: Uint8Array): this {
    const at = this.grow(b.length);
    this.buf.set(b, at);
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
