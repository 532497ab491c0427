// Writes small random-weight models as GGUF files that both tandem and llama.cpp load: the
// tensors of `tinyModelFile` (F32) quantised to a chosen type, plus a SentencePiece-style
// vocabulary (unk/bos/eos, the 256 byte tokens, filler pieces) so llama.cpp accepts the file.
import { writeFileSync } from 'node:fs';
import { GgmlType, quantize } from '../../src/kernels/quant/index.js';
import { tinyModelFile, type TinyModelOptions } from '../../src/engine/model/tiny-model.js';

/** A metadata value with its GGUF type: 4 u32, 6 f32, 7 bool, 8 string, 9 array of (5 i32 | 6 f32 | 8 string). */
type GgufValue =
  | { type: 4 | 6 | 7 | 8; value: number | boolean | string }
  | { type: 9; itemType: 5 | 6 | 8; items: (number | string)[] };

const gv = {
  u32: (value: number): GgufValue => ({ type: 4, value }),
  f32: (value: number): GgufValue => ({ type: 6, value }),
  bool: (value: boolean): GgufValue => ({ type: 7, value }),
  str: (value: string): GgufValue => ({ type: 8, value }),
  strings: (items: string[]): GgufValue => ({ type: 9, itemType: 8, items }),
  f32s: (items: number[]): GgufValue => ({ type: 9, itemType: 6, items }),
  i32s: (items: number[]): GgufValue => ({ type: 9, itemType: 5, items }),
};

/** A minimal GGUF v3 encoder (alignment 32), kept here so the oracle's files do not depend on the code under test. */
function encodeGguf(
  meta: Map<string, GgufValue>,
  tensors: { name: string; dims: number[]; type: number; data: Uint8Array }[],
): Buffer {
  const parts: Buffer[] = [];
  const u32 = (v: number): void => void parts.push(Buffer.from(new Uint32Array([v]).buffer));
  const u64 = (v: number): void => void parts.push(Buffer.from(new BigUint64Array([BigInt(v)]).buffer));
  const str = (v: string): void => {
    const b = Buffer.from(v, 'utf8');
    u64(b.length);
    parts.push(b);
  };
  const scalar = (type: number, v: number | boolean | string): void => {
    if (type === 4) u32(v as number);
    else if (type === 5) parts.push(Buffer.from(new Int32Array([v as number]).buffer));
    else if (type === 6) parts.push(Buffer.from(new Float32Array([v as number]).buffer));
    else if (type === 7) parts.push(Buffer.from([v ? 1 : 0]));
    else str(v as string);
  };
  parts.push(Buffer.from('GGUF', 'latin1'));
  u32(3);
  u64(tensors.length);
  u64(meta.size);
  for (const [key, v] of meta) {
    str(key);
    u32(v.type);
    if (v.type === 9) {
      u32(v.itemType);
      u64(v.items.length);
      for (const item of v.items) scalar(v.itemType, item);
    } else scalar(v.type, v.value);
  }
  const pad = (n: number): number => (32 - (n % 32)) % 32;
  let offset = 0;
  for (const t of tensors) {
    str(t.name);
    u32(t.dims.length);
    for (const d of t.dims) u64(d);
    u32(t.type);
    u64(offset);
    offset += t.data.length + pad(t.data.length);
  }
  const headerLength = parts.reduce((n, b) => n + b.length, 0);
  parts.push(Buffer.alloc(pad(headerLength)));
  for (const t of tensors) parts.push(Buffer.from(t.data), Buffer.alloc(pad(t.data.length)));
  return Buffer.concat(parts);
}

export type WeightTypeName = 'F32' | 'F16' | 'BF16' | 'Q8_0' | 'Q4_0' | 'Q4_K' | 'Q5_K' | 'Q6_K';

/** Tensors that stay F32 whatever the weight type (as llama.cpp's quantiser leaves them). */
function keepF32(name: string, dims: readonly number[]): boolean {
  return dims.length < 2 || name.includes('ffn_gate_inp') || name.startsWith('rope_freqs');
}

function vocabulary(size: number): Map<string, GgufValue> {
  const tokens: string[] = ['<unk>', '<s>', '</s>'];
  const types: number[] = [2, 3, 3];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    types.push(6);
  }
  const letters = 'abcdefghijklmnopqrstuvwxyz';
  for (let i = 0; tokens.length < size; i++) {
    tokens.push(`▁${letters[i % 26]}${letters[Math.floor(i / 26) % 26]}${i >= 676 ? i : ''}`);
    types.push(1);
  }
  return new Map([
    ['tokenizer.ggml.model', gv.str('llama')],
    ['tokenizer.ggml.tokens', gv.strings(tokens.slice(0, size))],
    ['tokenizer.ggml.scores', gv.f32s(tokens.slice(0, size).map((_, i) => -i))],
    ['tokenizer.ggml.token_type', gv.i32s(types.slice(0, size))],
    ['tokenizer.ggml.unknown_token_id', gv.u32(0)],
    ['tokenizer.ggml.bos_token_id', gv.u32(1)],
    ['tokenizer.ggml.eos_token_id', gv.u32(2)],
    ['tokenizer.ggml.add_bos_token', gv.bool(false)],
  ]);
}

/** Writes the model to `path`; returns its vocabulary size. */
export function writeTinyGguf(path: string, options: TinyModelOptions, type: WeightTypeName): number {
  const file = tinyModelFile(options);
  const vocab = options.vocab ?? 64;
  const meta = new Map<string, GgufValue>();
  for (const key of [...metaKeys(options)]) {
    const v = file.meta(key);
    if (v === undefined) continue;
    meta.set(
      key,
      typeof v === 'string'
        ? gv.str(v)
        : key.endsWith('epsilon') || key.endsWith('freq_base')
          ? gv.f32(v as number)
          : gv.u32(v as number),
    );
  }
  meta.set('general.name', gv.str(`tiny random ${options.arch} ${type}`));
  for (const [k, v] of vocabulary(vocab)) meta.set(k, v);
  const tensors = [];
  for (const [name, entry] of file.tensors) {
    const bytes = file.readRows(
      name,
      0,
      entry.dims.slice(1).reduce((a, b) => a * b, 1),
    );
    const f32 = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
    const t = keepF32(name, entry.dims) ? GgmlType.F32 : GgmlType[type];
    tensors.push({ name, dims: [...entry.dims], type: t, data: quantize(t, f32) });
  }
  writeFileSync(path, encodeGguf(meta, tensors));
  return vocab;
}

function metaKeys(o: TinyModelOptions): string[] {
  const a = o.arch;
  return [
    'general.architecture',
    ...[
      'context_length',
      'embedding_length',
      'block_count',
      'feed_forward_length',
      'attention.head_count',
      'attention.head_count_kv',
      'attention.key_length',
      'attention.value_length',
      'attention.layer_norm_rms_epsilon',
      'rope.freq_base',
      'vocab_size',
      'expert_count',
      'expert_used_count',
      'expert_feed_forward_length',
      'expert_shared_feed_forward_length',
    ].map((k) => `${a}.${k}`),
  ];
}
