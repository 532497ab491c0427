// Temporary: a tiny GGUF v3 writer (metadata plus zero-filled F32 tensors) so the llama.cpp
// oracle can load a vocabulary before src/engine/format's writer lands. Delete when it does.
import { writeFileSync } from 'node:fs';

export type GgufValue =
  | { type: 'u32'; value: number }
  | { type: 'f32'; value: number }
  | { type: 'bool'; value: boolean }
  | { type: 'str'; value: string }
  | { type: 'str[]'; value: readonly string[] }
  | { type: 'f32[]'; value: readonly number[] }
  | { type: 'i32[]'; value: readonly number[] };

const T_U32 = 4;
const T_I32 = 5;
const T_F32 = 6;
const T_BOOL = 7;
const T_STR = 8;
const T_ARR = 9;

class Out {
  private chunks: Buffer[] = [];
  u32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.chunks.push(b);
  }
  u64(v: number): void {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.chunks.push(b);
  }
  u8(v: number): void {
    this.chunks.push(Buffer.from([v]));
  }
  i32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeInt32LE(v);
    this.chunks.push(b);
  }
  f32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeFloatLE(v);
    this.chunks.push(b);
  }
  str(s: string): void {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.chunks.push(b);
  }
  bytes(): Buffer {
    return Buffer.concat(this.chunks);
  }
}

function writeValue(out: Out, v: GgufValue): void {
  switch (v.type) {
    case 'u32':
      out.u32(T_U32);
      out.u32(v.value);
      return;
    case 'f32':
      out.u32(T_F32);
      out.f32(v.value);
      return;
    case 'bool':
      out.u32(T_BOOL);
      out.u8(v.value ? 1 : 0);
      return;
    case 'str':
      out.u32(T_STR);
      out.str(v.value);
      return;
    case 'str[]':
      out.u32(T_ARR);
      out.u32(T_STR);
      out.u64(v.value.length);
      for (const s of v.value) out.str(s);
      return;
    case 'f32[]':
      out.u32(T_ARR);
      out.u32(T_F32);
      out.u64(v.value.length);
      for (const x of v.value) out.f32(x);
      return;
    case 'i32[]':
      out.u32(T_ARR);
      out.u32(T_I32);
      out.u64(v.value.length);
      for (const x of v.value) out.i32(x);
      return;
  }
}

export interface ZeroTensor {
  name: string;
  /** ggml order: contiguous dimension first. */
  dims: readonly number[];
}

const ALIGN = 32;
const alignUp = (n: number): number => Math.ceil(n / ALIGN) * ALIGN;

/** Writes a GGUF v3 file with the given metadata and zero-filled F32 tensors. */
export function writeGguf(
  path: string,
  kv: ReadonlyArray<readonly [string, GgufValue]>,
  tensors: readonly ZeroTensor[],
): void {
  const out = new Out();
  out.u32(0x46554747);
  out.u32(3);
  out.u64(tensors.length);
  out.u64(kv.length);
  for (const [key, value] of kv) {
    out.str(key);
    writeValue(out, value);
  }
  let offset = 0;
  for (const t of tensors) {
    out.str(t.name);
    out.u32(t.dims.length);
    for (const d of t.dims) out.u64(d);
    out.u32(0);
    out.u64(offset);
    offset = alignUp(offset + 4 * t.dims.reduce((a, b) => a * b, 1));
  }
  const header = out.bytes();
  const file = Buffer.alloc(alignUp(header.length) + offset);
  header.copy(file);
  writeFileSync(path, file);
}
