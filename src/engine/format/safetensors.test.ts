import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GgmlType, quantize } from '../../kernels/quant/index.js';
import { isTandemError } from '../../errors/index.js';
import { encodeSafetensors, SafetensorsFile } from './safetensors.js';
import { parseHfConfig } from './hf-config.js';

const w = Float32Array.from({ length: 12 }, (_, i) => i - 5.5);
const good = () =>
  encodeSafetensors(
    [
      { name: 'w32', dtype: 'F32', shape: [3, 4], data: quantize(GgmlType.F32, w) },
      { name: 'w16', dtype: 'F16', shape: [3, 4], data: quantize(GgmlType.F16, w) },
      { name: 'wbf', dtype: 'BF16', shape: [12], data: quantize(GgmlType.BF16, w) },
    ],
    { format: 'pt' },
  );

test('safetensors reads F32, F16 and BF16 tensors, whole and by rows', () => {
  const f = SafetensorsFile.fromBytes(good());
  assert.deepEqual(f.metadata, { format: 'pt' });
  assert.deepEqual(f.tensor('w32').shape, [3, 4]);
  assert.equal(f.tensor('w32').rows, 3);
  for (const name of ['w32', 'w16', 'wbf']) assert.deepEqual(f.readTensorF32(name), w, name);
  assert.deepEqual(f.readTensorF32('w16', { rows: [1, 3] }), w.subarray(4));
  assert.throws(() => f.readTensor('w32', { rows: [2, 4] }), { code: 'MODEL_FORMAT_BAD_RANGE' });
  assert.throws(() => f.tensor('nope'), { code: 'MODEL_FORMAT_NOT_FOUND' });
});

function withHeader(json: string, dataBytes = 0, declared?: bigint): Uint8Array {
  const head = Buffer.from(json);
  const out = new Uint8Array(8 + head.length + dataBytes);
  new DataView(out.buffer).setBigUint64(0, declared ?? BigInt(head.length), true);
  out.set(head, 8);
  return out;
}

const t = (o: Record<string, unknown>) => JSON.stringify(o);
const cases: [string, Uint8Array, string, string][] = [
  ['file shorter than 8 bytes', new Uint8Array(5), 'MODEL_FORMAT_TRUNCATED', 'header_length'],
  ['header length beyond the file', withHeader('{}', 0, 1000n), 'MODEL_FORMAT_BAD_HEADER', 'header_length'],
  ['header length 2^64-1', withHeader('{}', 0, 2n ** 64n - 1n), 'MODEL_FORMAT_BAD_HEADER', 'header_length'],
  ['header over 100 MB', withHeader('{}', 0, 100_000_001n), 'MODEL_FORMAT_BAD_HEADER', 'header_length'],
  ['header not starting with {', withHeader(' {}'), 'MODEL_FORMAT_BAD_HEADER', 'header'],
  ['header not JSON', withHeader('{"a":'), 'MODEL_FORMAT_BAD_HEADER', 'header'],
  [
    'unknown dtype',
    withHeader(t({ a: { dtype: 'F12', shape: [1], data_offsets: [0, 4] } }), 4),
    'MODEL_FORMAT_BAD_TENSOR_TYPE',
    'tensor a dtype',
  ],
  [
    'negative dim',
    withHeader(t({ a: { dtype: 'F32', shape: [-1], data_offsets: [0, 4] } }), 4),
    'MODEL_FORMAT_BAD_DIMS',
    'tensor a shape',
  ],
  [
    'offsets reversed',
    withHeader(t({ a: { dtype: 'F32', shape: [1], data_offsets: [4, 0] } }), 4),
    'MODEL_FORMAT_BAD_OFFSET',
    'tensor a data_offsets',
  ],
  [
    'offsets overlapping',
    withHeader(
      t({
        a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] },
        b: { dtype: 'F32', shape: [2], data_offsets: [4, 12] },
      }),
      12,
    ),
    'MODEL_FORMAT_BAD_OFFSET',
    'tensor b data_offsets',
  ],
  [
    'offsets leaving a hole',
    withHeader(
      t({
        a: { dtype: 'F32', shape: [1], data_offsets: [0, 4] },
        b: { dtype: 'F32', shape: [1], data_offsets: [8, 12] },
      }),
      12,
    ),
    'MODEL_FORMAT_BAD_OFFSET',
    'tensor b data_offsets',
  ],
  [
    'hole at the start',
    withHeader(t({ a: { dtype: 'F32', shape: [1], data_offsets: [4, 8] } }), 8),
    'MODEL_FORMAT_BAD_OFFSET',
    'tensor a data_offsets',
  ],
  [
    'bytes disagreeing with shape x dtype',
    withHeader(t({ a: { dtype: 'F16', shape: [3], data_offsets: [0, 8] } }), 8),
    'MODEL_FORMAT_BAD_DIMS',
    'tensor a shape',
  ],
  [
    'shape product overflowing',
    withHeader(t({ a: { dtype: 'F32', shape: [2 ** 40, 2 ** 40], data_offsets: [0, 8] } }), 8),
    'MODEL_FORMAT_BAD_DIMS',
    'tensor a shape',
  ],
  [
    'data past the end',
    withHeader(t({ a: { dtype: 'F32', shape: [4], data_offsets: [0, 16] } }), 8),
    'MODEL_FORMAT_TRUNCATED',
    'tensor a data',
  ],
  [
    'metadata not strings',
    withHeader(t({ __metadata__: { a: 1 } })),
    'MODEL_FORMAT_BAD_HEADER',
    '__metadata__',
  ],
];

for (const [name, bytes, code, field] of cases) {
  test(`malformed safetensors: ${name} -> ${code}`, () => {
    assert.throws(
      () => SafetensorsFile.fromBytes(bytes, 'bad.safetensors'),
      (e: unknown) =>
        isTandemError(e) &&
        e.code === code &&
        e.details.field === field &&
        e.message.startsWith('bad.safetensors'),
    );
  });
}

const llamaConfig = {
  architectures: ['LlamaForCausalLM'],
  model_type: 'llama',
  hidden_size: 2048,
  intermediate_size: 5632,
  num_hidden_layers: 22,
  num_attention_heads: 32,
  num_key_value_heads: 4,
  vocab_size: 32000,
  max_position_embeddings: 2048,
  rms_norm_eps: 1e-5,
  rope_theta: 10000,
  tie_word_embeddings: false,
  torch_dtype: 'bfloat16',
};

test('config.json of a Llama and a Mixtral parse', () => {
  const c = parseHfConfig(JSON.stringify(llamaConfig));
  assert.equal(c.headDim, 64);
  assert.equal(c.numKeyValueHeads, 4);
  assert.equal(c.numExperts, 0);
  const m = parseHfConfig(
    JSON.stringify({
      ...llamaConfig,
      model_type: 'mixtral',
      num_local_experts: 8,
      num_experts_per_tok: 2,
      rope_scaling: { rope_type: 'llama3', factor: 8 },
    }),
  );
  assert.equal(m.numExperts, 8);
  assert.equal(m.numExpertsPerTok, 2);
  assert.deepEqual(m.ropeScaling, { rope_type: 'llama3', factor: 8 });
});

const configCases: [string, string, string][] = [
  ['not JSON', '{', 'json'],
  ['an array', '[]', 'json'],
  ['missing hidden_size', JSON.stringify({ ...llamaConfig, hidden_size: undefined }), 'hidden_size'],
  ['fractional layers', JSON.stringify({ ...llamaConfig, num_hidden_layers: 2.5 }), 'num_hidden_layers'],
  [
    'kv heads not dividing heads',
    JSON.stringify({ ...llamaConfig, num_key_value_heads: 5 }),
    'num_key_value_heads',
  ],
  ['string eps', JSON.stringify({ ...llamaConfig, rms_norm_eps: '1e-5' }), 'rms_norm_eps'],
  [
    'experts without per-token count',
    JSON.stringify({ ...llamaConfig, num_local_experts: 8 }),
    'num_experts_per_tok',
  ],
  [
    'more experts per token than experts',
    JSON.stringify({ ...llamaConfig, num_local_experts: 2, num_experts_per_tok: 3 }),
    'num_experts_per_tok',
  ],
];
for (const [name, text, field] of configCases) {
  test(`malformed config.json: ${name}`, () => {
    assert.throws(
      () => parseHfConfig(text),
      (e: unknown) => isTandemError(e, 'MODEL_FORMAT_BAD_CONFIG') && e.details.field === field,
    );
  });
}
