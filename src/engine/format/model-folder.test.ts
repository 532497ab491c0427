// A Hugging Face or MLX model folder must read as the GGUF model it was written from: the
// tests generate GGUF models, write them out as folders (src/engine/testing/hf-folder.ts,
// from the formats' documented layouts) and compare tensors, tokenizers and logits.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync, unlinkSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ReferenceKernels } from '../../kernels/index.js';
import { GgmlType, dequantize, quantize } from '../../kernels/quant/index.js';
import { GgufModelFile } from '../model/gguf-model-file.js';
import { MemoryModelFile } from '../model/model-file.js';
import { Model } from '../model/model.js';
import { Tokenizer, tokenizerMetadataFromGguf } from '../tokenizer/index.js';
import { quantizeMlx, writeHfFolder, type HfExportOptions } from '../testing/hf-folder.js';
import { convertFolder } from './convert-folder.js';
import { makeModel, type MakeModelOptions } from './make-model.js';
import { modelShapes, type ModelShape } from './model-plan.js';
import { encodeSafetensors } from './safetensors.js';

const shape: ModelShape = { ...modelShapes.tiny!, vocab: 1024 };
type Made = Omit<MakeModelOptions, 'shape'>;
const TEXTS = [
  'The harbor town woke slowly, and the café opened at 6.',
  "  Quick: 42 jars!\nthey're 1234567 über-naïve ☕ tests\t\tend ",
  '<|im_start|>user\nhello<|im_end|>',
];
const kernels = new ReferenceKernels();

function tmp(): string {
  return mkdtempSync(join(tmpdir(), 'tandem-folder-'));
}

async function withModel(o: Made, run: (gguf: string, dir: string) => Promise<void>): Promise<void> {
  const dir = tmp();
  try {
    const gguf = join(dir, 'model.gguf');
    await makeModel(gguf, { ...o, shape, seed: 3 });
    await run(gguf, dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function folderOf(gguf: string, dir: string, o: HfExportOptions): string {
  const out = join(dir, `hf-${o.dtype}-${o.mlx?.bits ?? 0}-${o.shards ?? 1}`);
  writeHfFolder(gguf, out, o);
  return out;
}

async function logits(file: GgufModelFile | MemoryModelFile, tokens: number[]): Promise<Float32Array> {
  const model = await Model.load(file, kernels);
  return model.forward(tokens, model.newSession());
}

function tokenizerOf(f: GgufModelFile): Tokenizer {
  return new Tokenizer(tokenizerMetadataFromGguf(f.gguf.metadata.entries));
}

function sameTokens(a: Tokenizer, b: Tokenizer): void {
  for (const text of TEXTS)
    for (const parseSpecial of [false, true])
      assert.deepEqual(
        b.encode(text, { parseSpecial }),
        a.encode(text, { parseSpecial }),
        `${text} (${parseSpecial})`,
      );
}

/** Every tensor of `b` (the folder) holds `expect(name, values of a)`, exactly. */
function sameTensors(
  a: GgufModelFile,
  b: GgufModelFile,
  expect: (name: string, x: Float32Array) => Float32Array,
): void {
  assert.deepEqual([...b.tensors.keys()].sort(), [...a.tensors.keys()].sort());
  for (const [name, t] of a.tensors) {
    assert.deepEqual(b.tensors.get(name)?.dims, t.dims, name);
    const want = expect(name, a.gguf.readTensorF32(name));
    const got = b.gguf.readTensorF32(name);
    assert.ok(
      want.every((x, i) => x === got[i]),
      `${name} differs`,
    );
  }
}

const exactCases: [string, Made, HfExportOptions][] = [
  ['llama, SentencePiece vocabulary, 3 shards', { arch: 'llama', type: 'f32' }, { dtype: 'F32', shards: 3 }],
  [
    'llama, Llama 3 BPE vocabulary, tied, rope scaling',
    { arch: 'llama', type: 'f32', vocab: 'bpe', tied: true, ropeScaling: 'llama3' },
    { dtype: 'F32' },
  ],
  ['qwen2 (biases, Qwen2 pre-tokenizer)', { arch: 'qwen2', type: 'f32' }, { dtype: 'F32' }],
  ['qwen3 (q/k norms)', { arch: 'qwen3', type: 'f32' }, { dtype: 'F32' }],
  ['Mixtral (per-expert tensors)', { arch: 'moe', type: 'f32' }, { dtype: 'F32' }],
  ['qwen2moe (shared expert)', { arch: 'qwen2moe', type: 'f32' }, { dtype: 'F32', shards: 2 }],
];

for (const [name, made, exported] of exactCases) {
  test(`an F32 folder of ${name} reads as its GGUF: same tensors, tokens and logits`, async () => {
    await withModel(made, async (gguf, dir) => {
      const a = GgufModelFile.open(gguf);
      const b = GgufModelFile.open(folderOf(gguf, dir, exported));
      try {
        sameTensors(a, b, (_n, x) => x);
        // A tensor-parallel shard reads row and column ranges (block by block, row by row).
        for (const name of ['blk.1.attn_output.weight', 'blk.0.attn_k.weight', 'token_embd.weight']) {
          const part = { rows: [3, 9], columns: [64, 128] } as const;
          assert.deepEqual(b.gguf.readTensor(name, part), a.gguf.readTensor(name, part), name);
        }
        sameTokens(tokenizerOf(a), tokenizerOf(b));
        const prompt = tokenizerOf(a).encode(TEXTS[0]!, { addBos: true });
        assert.deepEqual(await logits(b, prompt), await logits(a, prompt));
      } finally {
        a.close();
        b.close();
      }
    });
  });
}

for (const dtype of ['F16', 'BF16'] as const) {
  test(`a ${dtype} folder holds the GGUF's values rounded to ${dtype}, stored as ${dtype}`, async () => {
    await withModel({ arch: 'qwen2', type: 'f32' }, async (gguf, dir) => {
      const a = GgufModelFile.open(gguf);
      const b = GgufModelFile.open(folderOf(gguf, dir, { dtype }));
      const type = GgmlType[dtype];
      try {
        sameTensors(a, b, (_n, x) => dequantize(type, quantize(type, x), x.length));
        assert.equal(b.tensors.get('blk.0.attn_q.weight')?.type, type);
        assert.equal(b.tensors.get('blk.0.attn_norm.weight')?.type, GgmlType.F32);
      } finally {
        a.close();
        b.close();
      }
    });
  });
}

const mlxCases: [Made['arch'], number][] = [
  ['llama', 4],
  ['llama', 8],
  ['qwen3moe', 4],
];

for (const [arch, bits] of mlxCases) {
  test(`an MLX ${bits}-bit ${arch} folder (experts as switch_mlp) dequantizes to F16 exactly and runs like its F32 twin`, async () => {
    await withModel({ arch, type: 'f32' }, async (gguf, dir) => {
      const q = { bits, groupSize: 64 };
      const a = GgufModelFile.open(gguf);
      const b = GgufModelFile.open(folderOf(gguf, dir, { dtype: 'F16', mlx: q }));
      const deq = (n: string, x: Float32Array): Float32Array =>
        a.tensors.get(n)!.dims.length >= 2 ? quantizeMlx(x, q).dequantized : x;
      const f16 = (x: Float32Array): Float32Array =>
        dequantize(GgmlType.F16, quantize(GgmlType.F16, x), x.length);
      try {
        // Matrices become F16; MoE routers stay F32 (as llama.cpp keeps them); vectors are not quantized.
        sameTensors(a, b, (n, x) =>
          n.includes('ffn_gate_inp')
            ? deq(n, x)
            : a.tensors.get(n)!.dims.length >= 2
              ? f16(deq(n, x))
              : f16(x),
        );
        const twin = new MemoryModelFile(
          new Map([...a.gguf.metadata.entries.keys()].map((k) => [k, a.meta(k)])),
          new Map(
            [...a.tensors].map(([n, t]) => [
              n,
              {
                type: GgmlType.F32,
                dims: t.dims,
                data: quantize(GgmlType.F32, deq(n, a.gguf.readTensorF32(n))),
              },
            ]),
          ),
        );
        const prompt = tokenizerOf(a).encode(TEXTS[0]!, { addBos: true });
        const [x, y] = [await logits(b, prompt), await logits(twin, prompt)];
        let diff = 0;
        let scale = 0;
        for (let i = 0; i < x.length; i++)
          [diff, scale] = [Math.max(diff, Math.abs(x[i]! - y[i]!)), Math.max(scale, Math.abs(y[i]!))];
        // Weights rounded to f16 (relative 2^-11) and f16 activations in the dot: ~1e-3 of the range.
        assert.ok(diff / scale < 5e-3, `relative logit difference ${diff / scale}`);
      } finally {
        a.close();
        b.close();
      }
    });
  });
}

test('convert writes a GGUF that holds the folder as read, and q8_0 on request', async () => {
  await withModel({ arch: 'qwen3', type: 'f32' }, async (gguf, dir) => {
    const folder = folderOf(gguf, dir, { dtype: 'BF16' });
    const out = join(dir, 'out.gguf');
    await convertFolder(folder, out);
    const a = GgufModelFile.open(folder);
    const b = GgufModelFile.open(out);
    try {
      sameTensors(a, b, (_n, x) => x);
      assert.deepEqual(b.tensors.get('blk.1.ffn_up.weight')?.type, GgmlType.BF16);
    } finally {
      a.close();
      b.close();
    }
    await convertFolder(folder, out, { type: 'q8_0' });
    const c = GgufModelFile.open(out);
    try {
      assert.equal(c.tensors.get('blk.1.ffn_up.weight')?.type, GgmlType.Q8_0);
      assert.equal(c.meta('general.file_type'), 7);
    } finally {
      c.close();
    }
  });
});

test('folder errors are typed and name the file, the architecture or the tensor', async () => {
  await withModel({ arch: 'llama', type: 'f32' }, async (gguf, dir) => {
    const folder = folderOf(gguf, dir, { dtype: 'F32', shards: 2 });
    const config = readFileSync(join(folder, 'config.json'), 'utf8');
    const expectError = (code: string, pattern: RegExp): void =>
      assert.throws(
        () => GgufModelFile.open(folder).close(),
        (e: Error & { code?: string }) => e.code === code && pattern.test(e.message),
      );

    writeFileSync(join(folder, 'config.json'), config.replace('"llama"', '"gpt_neox"'));
    expectError('MODEL_FOLDER_UNSUPPORTED', /gpt_neox.*llama, mistral, mixtral, qwen2/);
    unlinkSync(join(folder, 'config.json'));
    expectError('MODEL_FOLDER_INCOMPLETE', /no config\.json/);
    writeFileSync(join(folder, 'config.json'), config);

    unlinkSync(join(folder, 'model-00002-of-00002.safetensors'));
    expectError('MODEL_FOLDER_INCOMPLETE', /model-00002-of-00002\.safetensors/);
    rmSync(join(folder, 'model.safetensors.index.json'));
    rmSync(join(folder, 'model-00001-of-00002.safetensors'));

    const norm = (name: string, dtype: string) => ({
      name,
      dtype,
      shape: [4],
      data: new Uint8Array(dtype === 'I32' ? 16 : 16),
    });
    writeFileSync(join(folder, 'model.safetensors'), encodeSafetensors([norm('model.norm.weight', 'F32')]));
    expectError('MODEL_FOLDER_INCOMPLETE', /model\.embed_tokens\.weight.*token_embd\.weight/);
    writeFileSync(
      join(folder, 'model.safetensors'),
      encodeSafetensors([{ ...norm('model.embed_tokens.weight', 'I32') }]),
    );
    expectError('MODEL_FOLDER_UNSUPPORTED', /dtype I32/);
    unlinkSync(join(folder, 'tokenizer.json'));
    expectError('MODEL_FOLDER_INCOMPLETE', /no tokenizer\.json/);
  });
});
