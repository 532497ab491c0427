import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GgmlType, dequantize, quantize } from '../../kernels/quant/index.js';
import { GgufFile } from './gguf-reader.js';
import { makeModel, planFor, tensorF32 } from './make-model.js';
import { llama3RopeFactors, modelArchs, modelShapes, tensorType } from './model-plan.js';

const names = (arch: (typeof modelArchs)[number]) =>
  planFor({ arch, shape: 'tiny', type: 'f32' }).tensors.map((t) => t.name);

test('each architecture has llama.cpp tensor names and dims', () => {
  const llama = names('llama');
  for (const n of [
    'token_embd.weight',
    'output_norm.weight',
    'output.weight',
    'blk.1.attn_q.weight',
    'blk.1.ffn_gate.weight',
    'blk.1.ffn_down.weight',
  ])
    assert.ok(llama.includes(n), n);
  assert.ok(!llama.some((n) => n.endsWith('.bias') || n.includes('exps') || n.includes('q_norm')));
  assert.ok(names('qwen2').includes('blk.0.attn_k.bias'));
  assert.ok(names('qwen3').includes('blk.0.attn_k_norm.weight'));
  const moe = planFor({ arch: 'moe', shape: 'tiny', type: 'f32' });
  const s = modelShapes.tiny!;
  assert.equal(moe.metadata.get('general.architecture')?.value, 'llama');
  assert.equal(moe.metadata.get('llama.expert_count')?.value, s.experts);
  assert.deepEqual(moe.tensors.find((t) => t.name === 'blk.0.ffn_down_exps.weight')?.dims, [
    s.expertFf,
    s.embd,
    s.experts,
  ]);
  assert.deepEqual(moe.tensors.find((t) => t.name === 'blk.0.ffn_gate_inp.weight')?.dims, [
    s.embd,
    s.experts,
  ]);
  assert.ok(names('qwen2moe').includes('blk.0.ffn_down_shexp.weight'));
  assert.ok(names('qwen3moe').includes('blk.0.attn_q_norm.weight'));
  const tied = planFor({ arch: 'qwen3', shape: 'tiny', type: 'f32', tied: true }).tensors.map((t) => t.name);
  assert.ok(!tied.includes('output.weight'));
  const big = planFor({ arch: 'llama', shape: 'tinyllama-1.1b', type: 'q8_0' });
  assert.ok(Math.abs(big.params - 1.1e9) < 0.05e9, `tinyllama-1.1b has ${big.params} parameters`);
  assert.equal(big.vocab.tokens.length, 32000);
});

test('q4_k_m mixes types as llama.cpp does', () => {
  const plan = planFor({ arch: 'llama', shape: 'tiny', type: 'q4_k_m' });
  const type = (n: string) => plan.tensors.find((t) => t.name === n)?.type;
  assert.equal(type('output.weight'), GgmlType.Q6_K);
  assert.equal(type('token_embd.weight'), GgmlType.Q4_K);
  assert.equal(type('blk.0.attn_v.weight'), GgmlType.Q4_K);
  assert.equal(type('blk.1.attn_v.weight'), GgmlType.Q6_K);
  assert.equal(type('blk.1.ffn_down.weight'), GgmlType.Q6_K);
  assert.equal(type('blk.0.attn_q.weight'), GgmlType.Q4_K);
  assert.equal(type('blk.0.attn_norm.weight'), GgmlType.F32);
  // 22 layers: use_more_bits picks 0, 1 (first eighth), 4, 7, 10, 13, 16, 19 and 20, 21 (last eighth).
  const picked = Array.from({ length: 22 }, (_, i) => i).filter(
    (i) => tensorType(`blk.${i}.ffn_down.weight`, [5632, 2048], 'q4_k_m', 22, 0, false) === GgmlType.Q6_K,
  );
  assert.deepEqual(picked, [0, 1, 4, 7, 10, 13, 16, 19, 20, 21]);
  assert.equal(tensorType('blk.0.ffn_gate_inp.weight', [256, 8], 'q4_k_m', 2, 8, false), GgmlType.F32);
  assert.equal(tensorType('token_embd.weight', [256, 100], 'q4_k_m', 2, 0, true), GgmlType.Q6_K);
  assert.equal(
    tensorType('blk.0.attn_q.weight', [96, 96], 'q4_k_m', 2, 0, false),
    GgmlType.Q8_0,
    'rows not a whole 256-block fall back',
  );
  assert.equal(tensorType('output.weight', [256, 100], 'q8_0', 2, 0, true), GgmlType.Q8_0);
});

test('make-model writes what it plans, the same bytes on 1 or 2 threads, and says the weights are random', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-mm-'));
  try {
    const o = { arch: 'qwen2', shape: 'tiny', type: 'q4_k_m', seed: 3 } as const;
    const a = join(dir, 'a.gguf');
    const { plan } = await makeModel(a, o);
    await makeModel(join(dir, 'b.gguf'), { ...o, threads: 2 });
    await makeModel(join(dir, 'c.gguf'), { ...o, seed: 4 });
    const hash = (p: string) =>
      createHash('sha256')
        .update(readFileSync(join(dir, p)))
        .digest('hex');
    assert.equal(hash('a.gguf'), hash('b.gguf'));
    assert.notEqual(hash('a.gguf'), hash('c.gguf'));
    const f = GgufFile.open(a);
    try {
      assert.match(f.metadata.string('general.description'), /RANDOM WEIGHTS/);
      assert.equal(f.metadata.number('general.file_type'), 15);
      assert.equal(f.metadata.number('qwen2.block_count'), 2);
      assert.equal(f.metadata.strings('tokenizer.ggml.tokens').length, 4096);
      assert.deepEqual(
        f.tensors.map((t) => t.name),
        plan.tensors.map((t) => t.name),
      );
      const types = new Set<number>();
      for (const t of plan.tensors) {
        const info = f.tensor(t.name);
        assert.deepEqual(info.dims, t.dims);
        assert.equal(info.type.id, t.type);
        types.add(t.type);
        const x = tensorF32(t, 3);
        assert.deepEqual(f.readTensorF32(t.name), dequantize(t.type, quantize(t.type, x), x.length), t.name);
      }
      assert.deepEqual(
        [...types].sort((p, q) => p - q),
        [GgmlType.F32, GgmlType.Q4_K, GgmlType.Q6_K],
      );
      const bias = f.readTensorF32('blk.0.attn_q.bias');
      const std = Math.sqrt(bias.reduce((s, v) => s + v * v, 0) / bias.length);
      assert.ok(std > 0.015 && std < 0.025, `bias std ${std}`);
    } finally {
      f.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('Llama 3 RoPE scaling writes rope_freqs.weight: 1 for short wavelengths, 8 for long, smooth between', () => {
  const f = llama3RopeFactors(64);
  assert.equal(f.length, 32);
  assert.equal(f[0], 1);
  assert.equal(f[31], 8);
  for (let i = 1; i < f.length; i++) assert.ok((f[i] as number) >= (f[i - 1] as number));
  assert.ok(
    f.some((v) => v > 1 && v < 8),
    'some frequencies are blended',
  );
  const plan = planFor({ arch: 'moe', shape: 'tiny', type: 'q8_0', ropeScaling: 'llama3' });
  assert.deepEqual(plan.tensors.find((t) => t.name === 'rope_freqs.weight')?.dims, [32]);
  assert.equal(plan.metadata.get('llama.rope.freq_base')?.value, 500000);
  assert.deepEqual(
    tensorF32(
      plan.tensors.find((t) => t.name === 'rope_freqs.weight')!,
      0,
    ),
    f,
  );
  assert.throws(() => planFor({ arch: 'qwen2', shape: 'tiny', type: 'f32', ropeScaling: 'llama3' }), {
    code: 'MODEL_FORMAT_UNSUPPORTED',
  });
});
