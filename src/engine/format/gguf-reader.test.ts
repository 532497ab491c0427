import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GgmlType, dequantize, quantize } from '../../kernels/quant/index.js';
import { isTandemError } from '../../errors/index.js';
import { ByteBuilder } from './byte-builder.js';
import { GgufFile } from './gguf-reader.js';
import { GgufValueType, type GgufArray, type GgufValue } from './gguf-types.js';
import { encodeGguf, gv, writeGguf, type TensorSpec } from './gguf-writer.js';

function values(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.sin(i * 0.37 + seed) * 0.5;
  return out;
}

function everyTypeMetadata(): Map<string, GgufValue> {
  const nested: GgufArray = {
    itemType: GgufValueType.ARRAY,
    items: [
      { itemType: GgufValueType.INT32, items: Int32Array.of(1, -2) },
      { itemType: GgufValueType.STRING, items: ['a', 'ß'] },
    ],
  };
  return new Map<string, GgufValue>([
    ['general.architecture', gv.str('llama')],
    ['t.u8', { type: GgufValueType.UINT8, value: 250 }],
    ['t.i8', { type: GgufValueType.INT8, value: -5 }],
    ['t.u16', { type: GgufValueType.UINT16, value: 65000 }],
    ['t.i16', { type: GgufValueType.INT16, value: -30000 }],
    ['t.u32', gv.u32(4000000000)],
    ['t.i32', gv.i32(-7)],
    ['t.f32', gv.f32(0.5)],
    ['t.bool', gv.bool(true)],
    ['t.str', gv.str('héllo ▁world')],
    ['t.u64', gv.u64(2n ** 60n)],
    ['t.i64', { type: GgufValueType.INT64, value: -(2n ** 40n) }],
    ['t.f64', { type: GgufValueType.FLOAT64, value: Math.PI }],
    ['t.arr.f32', gv.f32s([1, 2.5])],
    [
      't.arr.bool',
      { type: GgufValueType.ARRAY, value: { itemType: GgufValueType.BOOL, items: [true, false] } },
    ],
    [
      't.arr.u64',
      {
        type: GgufValueType.ARRAY,
        value: { itemType: GgufValueType.UINT64, items: BigUint64Array.of(1n, 2n ** 63n) },
      },
    ],
    ['t.arr.nested', { type: GgufValueType.ARRAY, value: nested }],
    ['t.arr.empty', gv.strings([])],
  ]);
}

const specs: TensorSpec[] = [
  { name: 'a.f32', dims: [8, 3], type: GgmlType.F32 },
  { name: 'b.q8', dims: [64, 5], type: GgmlType.Q8_0 },
  { name: 'c.q4k', dims: [256, 2, 2], type: GgmlType.Q4_K },
  { name: 'd.f16', dims: [5], type: GgmlType.F16 },
];

test('GGUF written by writeGguf reads back: every value type, tensor infos, row slices', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-gguf-'));
  try {
    const path = join(dir, 'm.gguf');
    const sources = specs.map((s, i) =>
      values(
        s.dims.reduce((a, b) => a * b, 1),
        i,
      ),
    );
    const meta = everyTypeMetadata();
    let progress = 0;
    await writeGguf(path, meta, specs, (t, i) => quantize(t.type, sources[i] as Float32Array), {
      onProgress: () => progress++,
    });
    assert.equal(progress, specs.length);
    const f = GgufFile.open(path);
    try {
      assert.equal(f.version, 3);
      assert.equal(f.alignment, 32);
      assert.equal(f.dataOffset % 32, 0);
      assert.deepEqual(f.metadata.keys(), [...meta.keys()]);
      for (const [k, v] of meta) assert.deepEqual(f.metadata.get(k), v, k);
      assert.equal(f.metadata.number('t.u32'), 4000000000);
      assert.throws(() => f.metadata.number('t.u64'), { code: 'MODEL_FORMAT_BAD_METADATA' });
      assert.equal(f.architecture, 'llama');
      assert.throws(() => f.metadata.string('t.u32'), { code: 'MODEL_FORMAT_BAD_METADATA' });
      assert.throws(() => f.metadata.number('missing'), { code: 'MODEL_FORMAT_NOT_FOUND' });
      const c = f.tensor('c.q4k');
      assert.deepEqual(c.dims, [256, 2, 2]);
      assert.equal(c.rows, 4);
      assert.equal(c.rowBytes, 144);
      assert.equal(c.byteLength, 576);
      for (const [i, s] of specs.entries()) {
        const t = f.tensor(s.name);
        assert.equal(t.offset % 32, 0);
        const want = dequantize(s.type, quantize(s.type, sources[i] as Float32Array), t.elements);
        assert.deepEqual(f.readTensorF32(s.name), want, s.name);
      }
      const whole = f.readTensor('b.q8');
      assert.deepEqual(f.readTensor('b.q8', { rows: [2, 4] }), whole.subarray(2 * 68, 4 * 68));
      assert.deepEqual(f.readTensorF32('c.q4k', { rows: [3, 4] }), f.readTensorF32('c.q4k').subarray(768));
      assert.throws(() => f.readTensor('b.q8', { rows: [4, 6] }), { code: 'MODEL_FORMAT_BAD_RANGE' });
      // Columns: the second 32-value block of rows 1..3 of b.q8 (64 x 5 Q8_0, 68 bytes a row).
      const cols = f.readTensor('b.q8', { rows: [1, 3], columns: [32, 64] });
      assert.deepEqual(
        cols,
        Uint8Array.from([...whole.subarray(68 + 34, 136), ...whole.subarray(136 + 34, 204)]),
      );
      const all = f.readTensorF32('b.q8');
      assert.deepEqual(
        f.readTensorF32('b.q8', { rows: [1, 3], columns: [32, 64] }),
        Float32Array.from([...all.subarray(96, 128), ...all.subarray(160, 192)]),
      );
      assert.deepEqual(
        f.readTensorF32('a.f32', { columns: [2, 5] }),
        Float32Array.from(
          [0, 1, 2].flatMap((r) => [...f.readTensorF32('a.f32').subarray(r * 8 + 2, r * 8 + 5)]),
        ),
      );
      assert.throws(() => f.readTensor('b.q8', { columns: [16, 48] }), { code: 'MODEL_FORMAT_BAD_RANGE' });
      assert.throws(() => f.readTensor('c.q4k', { columns: [0, 512] }), { code: 'MODEL_FORMAT_BAD_RANGE' });
      assert.throws(() => f.readTensor('nope'), { code: 'MODEL_FORMAT_NOT_FOUND' });
    } finally {
      f.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('GGUF v2 and a custom alignment read back', () => {
  const meta = new Map([['general.alignment', gv.u32(64)]]);
  const bytes = encodeGguf(
    meta,
    specs.slice(0, 2),
    [quantize(GgmlType.F32, values(24, 0)), quantize(GgmlType.Q8_0, values(320, 1))],
    64,
  );
  const f = GgufFile.fromBytes(bytes);
  assert.equal(f.alignment, 64);
  assert.equal(f.tensor('b.q8').offset, 128);
  new DataView(bytes.buffer).setUint32(4, 2, true);
  assert.equal(GgufFile.fromBytes(bytes).version, 2);
});

// ---- malformed files: a raw builder that can write anything ----

interface Raw {
  magic?: number;
  version?: number;
  tensorCount?: bigint;
  kvCount?: bigint;
  kv?: (b: ByteBuilder) => void;
  tensors?: (b: ByteBuilder) => void;
  align?: number;
  data?: number;
}

function raw(r: Raw): Uint8Array {
  const kv = new ByteBuilder();
  r.kv?.(kv);
  const b = new ByteBuilder()
    .u32(r.magic ?? 0x46554747)
    .u32(r.version ?? 3)
    .u64(r.tensorCount ?? (r.tensors ? 1n : 0n))
    .u64(r.kvCount ?? (r.kv ? 1n : 0n))
    .bytes(kv.finish());
  r.tensors?.(b);
  b.pad(r.align ?? 32);
  b.bytes(new Uint8Array(r.data ?? 0));
  return b.finish();
}

/** One F32 tensor info: name, dims, type, offset. */
function tinfo(
  name: string,
  dims: (number | bigint)[],
  type = 0,
  offset: number | bigint = 0,
): (b: ByteBuilder) => void {
  return (b) => {
    b.str(name).u32(dims.length);
    for (const d of dims) b.u64(d);
    b.u32(type).u64(offset);
  };
}

function expectError(bytes: Uint8Array, code: string, field: RegExp | string): void {
  assert.throws(
    () => GgufFile.fromBytes(bytes, 'bad.gguf'),
    (e: unknown) => {
      assert.ok(isTandemError(e), `not a TandemError: ${String(e)}`);
      assert.equal(e.code, code, e.message);
      const f = String(e.details.field);
      if (typeof field === 'string') assert.equal(f, field, e.message);
      else assert.match(f, field, e.message);
      assert.ok(e.message.includes('bad.gguf'), e.message);
      return true;
    },
  );
}

const U64_MAX = 2n ** 64n - 1n;
const alignKv = (type: number, v: number) => (b: ByteBuilder) => b.str('general.alignment').u32(type).u32(v);

const cases: [string, Uint8Array, string, RegExp | string][] = [
  ['bad magic', raw({ magic: 0x46554746 }), 'MODEL_FORMAT_BAD_MAGIC', 'magic'],
  ['version 1', raw({ version: 1 }), 'MODEL_FORMAT_BAD_VERSION', 'version'],
  ['version 4', raw({ version: 4 }), 'MODEL_FORMAT_BAD_VERSION', 'version'],
  ['empty file', new Uint8Array(0), 'MODEL_FORMAT_TRUNCATED', 'magic'],
  ['tensor count beyond the file', raw({ tensorCount: 1000n }), 'MODEL_FORMAT_BAD_COUNT', 'tensor_count'],
  ['tensor count 2^64-1', raw({ tensorCount: U64_MAX }), 'MODEL_FORMAT_BAD_COUNT', 'tensor_count'],
  ['kv count 2^63', raw({ kvCount: 2n ** 63n }), 'MODEL_FORMAT_BAD_COUNT', 'metadata_kv_count'],
  [
    'key length 2^64-1',
    raw({ kv: (b) => b.u64(U64_MAX).u32(0) }),
    'MODEL_FORMAT_BAD_STRING',
    'metadata[0].key',
  ],
  [
    'string value past the end',
    raw({ kv: (b) => b.str('k').u32(8).u64(100).bytes(new Uint8Array(10)) }),
    'MODEL_FORMAT_BAD_STRING',
    'k',
  ],
  ['unknown value type', raw({ kv: (b) => b.str('k').u32(13).u32(0) }), 'MODEL_FORMAT_BAD_VALUE_TYPE', 'k'],
  [
    'unknown array item type',
    raw({ kv: (b) => b.str('k').u32(9).u32(99).u64(0) }),
    'MODEL_FORMAT_BAD_VALUE_TYPE',
    'k item',
  ],
  [
    'array count beyond the file',
    raw({
      kv: (b) =>
        b
          .str('k')
          .u32(9)
          .u32(6)
          .u64(2n ** 62n),
    }),
    'MODEL_FORMAT_BAD_COUNT',
    'k count',
  ],
  [
    'string array count beyond the file',
    raw({ kv: (b) => b.str('k').u32(9).u32(8).u64(1000) }),
    'MODEL_FORMAT_BAD_COUNT',
    'k count',
  ],
  [
    'truncated u32 value',
    raw({ kv: (b) => b.str('k').u32(4).u16(1) }).subarray(0, 24 + 9 + 4 + 2),
    'MODEL_FORMAT_TRUNCATED',
    'k',
  ],
  ['bool holding 2', raw({ kv: (b) => b.str('k').u32(7).u8(2) }), 'MODEL_FORMAT_BAD_METADATA', 'k'],
  [
    'arrays nested too deep',
    raw({
      kv: (b) =>
        b.str('k').u32(9).u32(9).u64(1).u32(9).u64(1).u32(9).u64(1).u32(9).u64(1).u32(9).u64(1).u32(4).u64(0),
    }),
    'MODEL_FORMAT_BAD_VALUE_TYPE',
    /^k/,
  ],
  [
    'duplicate key',
    raw({ kvCount: 2n, kv: (b) => b.str('k').u32(4).u32(1).str('k').u32(4).u32(2) }),
    'MODEL_FORMAT_DUPLICATE',
    'k',
  ],
  ['alignment 0', raw({ kv: alignKv(4, 0) }), 'MODEL_FORMAT_BAD_ALIGNMENT', 'general.alignment'],
  ['alignment 3', raw({ kv: alignKv(4, 3) }), 'MODEL_FORMAT_BAD_ALIGNMENT', 'general.alignment'],
  ['alignment 2^31', raw({ kv: alignKv(4, 2 ** 31) }), 'MODEL_FORMAT_BAD_ALIGNMENT', 'general.alignment'],
  ['alignment of type i32', raw({ kv: alignKv(5, 32) }), 'MODEL_FORMAT_BAD_ALIGNMENT', 'general.alignment'],
  ['zero dimensions', raw({ tensors: tinfo('t', []), data: 32 }), 'MODEL_FORMAT_BAD_DIMS', 'tensor t n_dims'],
  [
    'five dimensions',
    raw({ tensors: tinfo('t', [1, 1, 1, 1, 1]), data: 32 }),
    'MODEL_FORMAT_BAD_DIMS',
    'tensor t n_dims',
  ],
  [
    '2^32-1 dimensions',
    raw({
      tensors: (b) =>
        b
          .str('t')
          .u32(2 ** 32 - 1)
          .u64(1)
          .u32(0)
          .u64(0),
      data: 64,
    }),
    'MODEL_FORMAT_BAD_DIMS',
    'tensor t n_dims',
  ],
  [
    'a zero dimension',
    raw({ tensors: tinfo('t', [4, 0]), data: 32 }),
    'MODEL_FORMAT_BAD_DIMS',
    'tensor t dims[1]',
  ],
  [
    'unknown tensor type',
    raw({ tensors: tinfo('t', [4], 4), data: 32 }),
    'MODEL_FORMAT_BAD_TENSOR_TYPE',
    'tensor t type',
  ],
  [
    'tensor type 2^32-1',
    raw({ tensors: tinfo('t', [4], 2 ** 32 - 1), data: 32 }),
    'MODEL_FORMAT_BAD_TENSOR_TYPE',
    'tensor t type',
  ],
  [
    'row not a whole block',
    raw({ tensors: tinfo('t', [33, 2], GgmlType.Q8_0), data: 96 }),
    'MODEL_FORMAT_BAD_DIMS',
    'tensor t dims[0]',
  ],
  [
    'element count overflow',
    raw({ tensors: tinfo('t', [2n ** 32n, 2n ** 32n]), data: 32 }),
    'MODEL_FORMAT_OVERFLOW',
    'tensor t dims',
  ],
  [
    'byte size over 2^64',
    raw({ tensors: tinfo('t', [2n ** 62n, 2]), data: 32 }),
    'MODEL_FORMAT_OVERFLOW',
    'tensor t dims',
  ],
  [
    'byte size beyond the file',
    raw({ tensors: tinfo('t', [2n ** 40n]), data: 32 }),
    'MODEL_FORMAT_TRUNCATED',
    'tensor t data',
  ],
  [
    'offset + padded size overflow',
    raw({ tensors: tinfo('t', [4], 0, U64_MAX - 31n), data: 32 }),
    'MODEL_FORMAT_OVERFLOW',
    'tensor t offset',
  ],
  [
    'unaligned offset',
    raw({ tensors: tinfo('t', [4], 0, 4), data: 64 }),
    'MODEL_FORMAT_BAD_OFFSET',
    'tensor t offset',
  ],
  [
    'offset past the end',
    raw({ tensors: tinfo('t', [4], 0, 4096), data: 64 }),
    'MODEL_FORMAT_BAD_OFFSET',
    'tensor t offset',
  ],
  [
    'data truncated',
    raw({ tensors: tinfo('t', [64]), data: 100 }),
    'MODEL_FORMAT_TRUNCATED',
    'tensor t data',
  ],
  [
    'overlapping tensors',
    raw({ tensorCount: 2n, tensors: (b) => (tinfo('t', [16])(b), tinfo('u', [16], 0, 32)(b)), data: 128 }),
    'MODEL_FORMAT_BAD_OFFSET',
    'tensor u offset',
  ],
  [
    'offset disagreeing with the layout',
    raw({ tensorCount: 2n, tensors: (b) => (tinfo('t', [4])(b), tinfo('u', [4], 0, 64)(b)), data: 128 }),
    'MODEL_FORMAT_BAD_OFFSET',
    'tensor u offset',
  ],
  [
    'first tensor not at 0',
    raw({ tensors: tinfo('t', [4], 0, 32), data: 64 }),
    'MODEL_FORMAT_BAD_OFFSET',
    'tensor t offset',
  ],
  [
    'duplicate tensor name',
    raw({ tensorCount: 2n, tensors: (b) => (tinfo('t', [4])(b), tinfo('t', [4], 0, 32)(b)), data: 64 }),
    'MODEL_FORMAT_DUPLICATE',
    'tensor t',
  ],
  [
    'tensor name of 64 bytes',
    raw({ tensors: tinfo('x'.repeat(64), [4]), data: 32 }),
    'MODEL_FORMAT_BAD_STRING',
    /name$/,
  ],
  [
    'tokens of the wrong type',
    raw({ kv: (b) => b.str('tokenizer.ggml.tokens').u32(9).u32(5).u64(1).i32(0) }),
    'MODEL_FORMAT_BAD_METADATA',
    'tokenizer.ggml.tokens',
  ],
  [
    'scores of the wrong length',
    raw({
      kvCount: 2n,
      kv: (b) =>
        b
          .str('tokenizer.ggml.tokens')
          .u32(9)
          .u32(8)
          .u64(2)
          .str('a')
          .str('b')
          .str('tokenizer.ggml.scores')
          .u32(9)
          .u32(6)
          .u64(1)
          .f32(0),
    }),
    'MODEL_FORMAT_BAD_METADATA',
    'tokenizer.ggml.scores',
  ],
  [
    'token types of the wrong element type',
    raw({
      kvCount: 2n,
      kv: (b) =>
        b
          .str('tokenizer.ggml.tokens')
          .u32(9)
          .u32(8)
          .u64(1)
          .str('a')
          .str('tokenizer.ggml.token_type')
          .u32(9)
          .u32(6)
          .u64(1)
          .f32(1),
    }),
    'MODEL_FORMAT_BAD_METADATA',
    'tokenizer.ggml.token_type',
  ],
  [
    'merges not strings',
    raw({ kv: (b) => b.str('tokenizer.ggml.merges').u32(8).str('a b') }),
    'MODEL_FORMAT_BAD_METADATA',
    'tokenizer.ggml.merges',
  ],
  [
    'special token id outside the vocabulary',
    raw({
      kvCount: 2n,
      kv: (b) =>
        b
          .str('tokenizer.ggml.tokens')
          .u32(9)
          .u32(8)
          .u64(1)
          .str('a')
          .str('tokenizer.ggml.bos_token_id')
          .u32(4)
          .u32(1),
    }),
    'MODEL_FORMAT_BAD_METADATA',
    'tokenizer.ggml.bos_token_id',
  ],
];

for (const [name, bytes, code, field] of cases) {
  test(`malformed GGUF: ${name} -> ${code}`, () => expectError(bytes, code, field));
}

test('every truncation and every corrupted header byte of a real file is a typed error or a valid parse', () => {
  const meta = everyTypeMetadata();
  meta.set('tokenizer.ggml.tokens', gv.strings(['a', 'b', 'c']));
  meta.set('tokenizer.ggml.scores', gv.f32s([0, -1, -2]));
  const bytes = encodeGguf(
    meta,
    specs,
    specs.map((s, i) =>
      quantize(
        s.type,
        values(
          s.dims.reduce((a, b) => a * b, 1),
          i,
        ),
      ),
    ),
  );
  const parsed = GgufFile.fromBytes(bytes);
  const header = parsed.dataOffset;
  const last = parsed.tensors[parsed.tensors.length - 1]!;
  for (let n = 0; n < last.fileOffset + last.byteLength; n += n < header ? 1 : 61) {
    assert.throws(
      () => GgufFile.fromBytes(bytes.subarray(0, n)),
      (e: unknown) => isTandemError(e) && e.code.startsWith('MODEL_FORMAT_'),
      `prefix ${n}`,
    );
  }
  for (let i = 0; i < header; i++) {
    for (const v of [0x00, 0xff, 0x7f, 0x80]) {
      const copy = bytes.slice();
      copy[i] = v;
      try {
        GgufFile.fromBytes(copy);
      } catch (e) {
        assert.ok(isTandemError(e) && e.code.startsWith('MODEL_FORMAT_'), `byte ${i} = ${v}: ${String(e)}`);
      }
    }
  }
});
