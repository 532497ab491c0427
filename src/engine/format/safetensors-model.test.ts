import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GgmlType, quantize } from '../../kernels/quant/index.js';
import { encodeSafetensors } from './safetensors.js';
import { SafetensorsModel } from './safetensors-model.js';

const w = (n: number, k: number) => Float32Array.from({ length: n }, (_, i) => i * k);
const st = (name: string, data: Float32Array) =>
  encodeSafetensors([
    { name, dtype: 'F16', shape: [2, data.length / 2], data: quantize(GgmlType.F16, data) },
  ]);
const config = {
  model_type: 'llama',
  hidden_size: 8,
  intermediate_size: 16,
  num_hidden_layers: 1,
  num_attention_heads: 2,
  vocab_size: 10,
};

function folder(files: Record<string, Uint8Array | string>, run: (dir: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-st-'));
  try {
    for (const [name, data] of Object.entries(files)) writeFileSync(join(dir, name), data);
    run(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const index = (map: Record<string, string>) => JSON.stringify({ metadata: {}, weight_map: map });

test('a sharded model folder reads tensors from the right shard, with its config', () => {
  folder(
    {
      'config.json': JSON.stringify(config),
      'model-00001-of-00002.safetensors': st('a', w(8, 1)),
      'model-00002-of-00002.safetensors': st('b', w(6, 2)),
      'model.safetensors.index.json': index({
        a: 'model-00001-of-00002.safetensors',
        b: 'model-00002-of-00002.safetensors',
      }),
    },
    (dir) => {
      const m = SafetensorsModel.open(dir);
      try {
        assert.equal(m.config?.hiddenSize, 8);
        assert.deepEqual(m.tensorNames.sort(), ['a', 'b']);
        assert.deepEqual(m.readTensorF32('b'), w(6, 2));
        assert.deepEqual(m.readTensorF32('a', { rows: [1, 2] }), w(8, 1).subarray(4));
        assert.throws(() => m.tensor('c'), { code: 'MODEL_FORMAT_NOT_FOUND' });
      } finally {
        m.close();
      }
    },
  );
});

test('a single-file folder works without an index', () => {
  folder({ 'model.safetensors': st('a', w(4, 3)) }, (dir) => {
    const m = SafetensorsModel.open(dir);
    assert.equal(m.config, undefined);
    assert.deepEqual(m.readTensorF32('a'), w(4, 3));
    m.close();
  });
});

const bad: [string, Record<string, Uint8Array | string>, string, string][] = [
  ['index not JSON', { 'model.safetensors.index.json': '{' }, 'MODEL_FORMAT_BAD_HEADER', 'json'],
  [
    'index without weight_map',
    { 'model.safetensors.index.json': '{}' },
    'MODEL_FORMAT_BAD_HEADER',
    'weight_map',
  ],
  [
    'shard outside the folder',
    { 'model.safetensors.index.json': index({ a: '../x.safetensors' }) },
    'MODEL_FORMAT_BAD_HEADER',
    'weight_map.a',
  ],
  [
    'missing shard',
    { 'model.safetensors.index.json': index({ a: 'm1.safetensors' }) },
    'MODEL_FORMAT_NOT_FOUND',
    'm1.safetensors',
  ],
  [
    'tensor not in its shard',
    {
      'm1.safetensors': st('a', w(4, 1)),
      'model.safetensors.index.json': index({ a: 'm1.safetensors', b: 'm1.safetensors' }),
    },
    'MODEL_FORMAT_NOT_FOUND',
    'tensor b',
  ],
  [
    'tensor in two shards',
    {
      'm1.safetensors': st('a', w(4, 1)),
      'm2.safetensors': st('a', w(4, 1)),
      'model.safetensors.index.json': index({ a: 'm1.safetensors', b: 'm2.safetensors' }),
    },
    'MODEL_FORMAT_DUPLICATE',
    'tensor a',
  ],
];
for (const [name, files, code, field] of bad) {
  test(`malformed model folder: ${name}`, () => {
    folder(files, (dir) =>
      assert.throws(
        () => SafetensorsModel.open(dir),
        (e: unknown) =>
          (e as { code: string }).code === code &&
          (e as { details: { field: string } }).details.field === field,
      ),
    );
  });
}
