import { test } from 'node:test';
import assert from 'node:assert/strict';
import { generate, openModel } from '../engine/index.js';
import { tempModel } from '../engine/testing/temp-model.js';
import { isTandemError } from '../errors/index.js';
import { GgmlType } from '../kernels/index.js';
import { GpuDevice, chooseKernels, gpuRowBytes, probeAdapter } from '../kernels/webgpu/index.js';
import { gpuRefusalFor, openGpuModel } from './webgpu-model.js';
import { runTandem } from './testing.js';

/**
 * The whole forward pass on the GPU against the CPU engine on the reference kernels (the
 * truth the wasm and native kernels are held to) on generated llama models: greedy tokens
 * identical, and every step's logits within a tolerance of the CPU's, relative to the largest
 * logit. The GPU sums in f32 trees where the twin sums in f64, so activations differ in the
 * last bits. Before an F16 product every activation is rounded to f16, and one whose last bit
 * differs can round to the neighbouring f16 value (2^-11 relative): over two layers of
 * 256-512-wide products that moves logits by ~3e-4 relative, hence F16_TOL; a 1-layer model
 * agrees to 3e-6. Q8_0 and q8_K blocks cross a rounding boundary far more rarely (Q8_TOL, for
 * the Q8_0 and Q4_K_M models; measured 1e-7 on Q8_0, where the wasm prefill differs from the
 * twin by 5e-3).
 */
const Q8_TOL = 1e-4;
const F16_TOL = 1e-3;
const probe = await probeAdapter();
const skip = probe.found ? false : `no WebGPU adapter here: ${probe.reason}`;

const q8 = tempModel('tandem-webgpu-q8-', { arch: 'llama', shape: 'tiny', type: 'q8_0', seed: 4 });
const f16 = tempModel('tandem-webgpu-f16-', {
  arch: 'llama',
  shape: 'tiny',
  type: 'f16',
  seed: 5,
  tied: true,
});
const q4km = tempModel('tandem-webgpu-q4km-', { arch: 'llama', shape: 'tiny', type: 'q4_k_m', seed: 7 });
const bf16 = tempModel('tandem-webgpu-bf16-', { arch: 'llama', shape: 'tiny', type: 'bf16', seed: 6 });
const qwen2 = tempModel('tandem-webgpu-qwen2-', { arch: 'qwen2', shape: 'tiny', type: 'q8_0', seed: 8 });
const qwen3 = tempModel('tandem-webgpu-qwen3-', { arch: 'qwen3', shape: 'tiny', type: 'q4_k_m', seed: 9 });
const mixtral = tempModel('tandem-webgpu-moe-', { arch: 'moe', shape: 'tiny', type: 'q8_0', seed: 13 });
const qwen2moe = tempModel('tandem-webgpu-qwen2moe-', {
  arch: 'qwen2moe',
  shape: 'tiny',
  type: 'q8_0',
  seed: 11,
});
const qwen3moe = tempModel('tandem-webgpu-qwen3moe-', {
  arch: 'qwen3moe',
  shape: 'tiny',
  type: 'f16',
  seed: 12,
});

/** A prompt of 70 tokens: two GPU chunks (64 + 6), then decode steps. */
const prompt = Array.from({ length: 70 }, (_, i) => 3 + ((i * 97) % 4000));

async function compare(
  path: string,
  tol: number,
  device = (): Promise<GpuDevice> => GpuDevice.open(),
): Promise<void> {
  const cpu = await openModel(path, { backend: 'reference', threads: 1, tokenizer: false });
  const gpu = await openGpuModel(path, await device(), { tokenizer: false });
  try {
    const logits: Float32Array[][] = [[], []];
    const run = async (i: number, m: typeof cpu.model | typeof gpu): Promise<number[]> =>
      (
        await generate(m, m.newSession({ contextLength: 128 }), prompt, {
          maxTokens: 6,
          onLogits: (l) => void logits[i]!.push(l.slice()),
        })
      ).tokens;
    const want = await run(0, cpu.model);
    const got = await run(1, gpu);
    assert.deepEqual(got, want, 'greedy tokens');
    for (let s = 0; s < want.length; s++) {
      const a = logits[1]![s]!;
      const b = logits[0]![s]!;
      let mag = 0;
      let worst = 0;
      for (let i = 0; i < b.length; i++) {
        mag = Math.max(mag, Math.abs(b[i]!));
        worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
      }
      assert.ok(worst <= tol * mag, `step ${s}: logits differ by ${worst} (largest ${mag})`);
    }
  } finally {
    await gpu.close();
    await cpu.close();
  }
}

test(
  'webgpu: a Q8_0 llama model gives the CPU path greedy tokens, logits within tolerance',
  { skip },
  async () => {
    await compare(q8(), Q8_TOL);
  },
);

test(
  'webgpu: an F16 llama model with tied embeddings gives the CPU path greedy tokens',
  { skip },
  async () => {
    await compare(f16(), F16_TOL);
  },
);

test('webgpu: a Q4_K_M llama model (Q4_K, Q6_K) gives the CPU path greedy tokens', { skip }, async () => {
  await compare(q4km(), Q8_TOL);
});

test(
  'webgpu: qwen2 (q/k/v biases) and qwen3 (q/k norms) give the CPU path greedy tokens',
  { skip },
  async () => {
    await compare(qwen2(), Q8_TOL);
    await compare(qwen3(), Q8_TOL);
  },
);

test(
  'webgpu: mixtures of experts (moe, qwen2moe with its shared expert, qwen3moe) give the CPU path greedy tokens',
  { skip },
  async () => {
    await compare(mixtral(), Q8_TOL);
    await compare(qwen2moe(), Q8_TOL);
    await compare(qwen3moe(), F16_TOL);
  },
);

test(
  'webgpu: a batched decode step gives each row the bits of its step alone (an MoE model: routing per row)',
  { skip },
  async () => {
    const gpu = await openGpuModel(qwen2moe(), await GpuDevice.open(), { tokenizer: false });
    try {
      const prompts = [[5], [6, 7, 8], Array.from({ length: 70 }, (_, i) => 9 + i), [3, 4]];
      const prefilled = async (): Promise<ReturnType<typeof gpu.newSession>[]> => {
        const caches = prompts.map(() => gpu.newSession({ contextLength: 96 }));
        for (const [i, p] of prompts.entries()) await gpu.forward(p, caches[i]!);
        return caches;
      };
      const next = [11, 12, 13, 14];
      const together = await gpu.forwardBatch(next, await prefilled());
      const caches = await prefilled();
      for (const [i, cache] of caches.entries()) {
        const alone = await gpu.forward([next[i]!], cache);
        assert.ok(
          alone.every((v, j) => Object.is(v, together[i]![j])),
          `row ${i}: batched logits differ from the step alone`,
        );
      }
      // a batch of one is the lone step too, and an MoE step reads nothing back before the logits
      const before = gpu.llama.gpu.submissions;
      await gpu.forwardBatch([15], [caches[0]!]);
      assert.equal(gpu.llama.gpu.submissions - before, 1);
    } finally {
      await gpu.close();
    }
  },
);

test(
  'webgpu: a weight past the largest binding is split across buffers (greedy tokens unchanged); a buffer that cannot be split is refused naming the limit',
  { skip },
  async () => {
    const mib = 1 << 20;
    // the output head (4096 rows of 256 Q8_0 elements) is larger than one such binding
    assert.ok(4096 * gpuRowBytes(GgmlType.Q8_0, 256) > mib);
    await compare(q8(), Q8_TOL, () =>
      GpuDevice.open({ maxStorageBufferBindingSize: mib, maxBufferSize: mib }),
    );
    const small = { maxStorageBufferBindingSize: mib / 2, maxBufferSize: mib / 2 };
    const refusal = gpuRefusalFor(q8(), 32)({ ...probe.found!.limits, ...small });
    assert.match(
      refusal ?? '',
      /the logits of 64 rows needs a 1048576-byte buffer.*maxStorageBufferBindingSize 524288/,
    );
    await assert.rejects(
      openGpuModel(q8(), await GpuDevice.open(small), { tokenizer: false }),
      (e) => isTandemError(e, 'KERNELS_DEVICE_LIMIT') && /maxStorageBufferBindingSize 524288/.test(e.message),
    );
  },
);

test('webgpu: one decode step is one submission plus the logits read-back', { skip }, async () => {
  const device = await GpuDevice.open();
  const gpu = await openGpuModel(q8(), device, { tokenizer: false });
  try {
    const cache = gpu.newSession({ contextLength: 16 });
    await gpu.forward([5, 6, 7], cache);
    const before = device.submissions;
    await gpu.forward([8], cache);
    assert.equal(device.submissions - before, 1);
    assert.equal(cache.length, 4);
  } finally {
    await gpu.close();
  }
});

test(
  'webgpu: --kernels webgpu refuses a model it does not run, naming why; auto falls back',
  { skip },
  async () => {
    await assert.rejects(
      chooseKernels('webgpu', gpuRefusalFor(bf16(), undefined)),
      (e) => isTandemError(e, 'KERNELS_DEVICE_LIMIT') && /is BF16; the WGSL kernels read/.test(e.message),
    );
    const auto = await chooseKernels('auto', gpuRefusalFor(bf16(), undefined));
    assert.ok(auto.backend === 'native' || auto.backend === 'wasm');
    assert.ok('note' in auto && /BF16/.test(auto.note ?? ''));
    const chosen = await chooseKernels('auto', gpuRefusalFor(q8(), 64));
    assert.equal(chosen.backend, 'webgpu');
    if (chosen.backend === 'webgpu') chosen.device.destroy();
  },
);

test(
  'tandem run --kernels webgpu: the greedy tokens of the default kernels; --kv-type f16 and --hosts refused',
  { skip },
  async () => {
    const args = [
      'run',
      q8(),
      '--prompt-tokens',
      '5,6,7,8',
      '--max-tokens',
      '6',
      '--temperature',
      '0',
      '--json',
    ];
    const gpu = runTandem([...args, '--kernels', 'webgpu']);
    assert.equal(gpu.code, 0, gpu.stderr);
    const cpu = runTandem([...args, '--threads', '1']);
    assert.equal(cpu.code, 0, cpu.stderr);
    const tokens = (out: string): number[] => (JSON.parse(out) as { tokens: number[] }).tokens;
    assert.deepEqual(tokens(gpu.stdout), tokens(cpu.stdout));
    const f16 = runTandem([...args, '--kernels', 'webgpu', '--kv-type', 'f16']);
    assert.notEqual(f16.code, 0);
    assert.match(f16.stderr, /WebGPU KV cache holds f32/);
    const nodes = runTandem([...args, '--kernels', 'webgpu', '--hosts', '/nonexistent-hosts']);
    assert.notEqual(nodes.code, 0);
    assert.match(nodes.stderr, /--kernels applies to runs on this machine or its local nodes/);
  },
);
