import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { referenceGemm } from '../../kernels/backward/gemm.js';
import { LlamaGrad } from './llama-grad.js';
import { MICRO_SHAPE, testBatch, testWeights } from './testing.js';

/** Debian's python3-torch is a development oracle only: without it the test says so and skips. */
const python = '/usr/bin/python3';
const torchMissing =
  spawnSync(python, ['-c', 'import torch'], { timeout: 60_000 }).status === 0
    ? false
    : `PyTorch is not installed (apt-get install python3-torch to run this oracle)`;

test(
  'gradients equal PyTorch autograd (float64) within 1e-4 of each tensor scale',
  { skip: torchMissing },
  () => {
    const { layout, weights } = testWeights(MICRO_SHAPE, 7);
    const [rows, seq] = [2, 7];
    const batch = testBatch(rows, seq, MICRO_SHAPE.vocab, 8);
    const grad = new Float32Array(layout.total);
    const loss = new LlamaGrad(layout, weights, referenceGemm).step(batch, rows, seq, grad);
    const request = {
      shape: MICRO_SHAPE,
      names: layout.entries.map((e) => e.name),
      dims: layout.entries.map((e) => [e.rows, e.cols]),
      weights: Array.from(weights),
      batch: Array.from(batch),
      rows,
      seq,
    };
    const run = spawnSync(python, [join(import.meta.dirname, 'torch-grad.py')], {
      input: JSON.stringify(request),
      timeout: 120_000,
      maxBuffer: 64 << 20,
    });
    assert.equal(run.status, 0, String(run.stderr));
    const want = JSON.parse(String(run.stdout)) as { loss: number; grad: number[] };
    assert.ok(Math.abs(loss - want.loss) < 1e-5, `loss ${loss} against torch's ${want.loss}`);
    for (const e of layout.entries) {
      let d = 0;
      let m = 0;
      for (let i = e.offset; i < e.offset + e.size; i++) {
        d = Math.max(d, Math.abs((grad[i] as number) - (want.grad[i] as number)));
        m = Math.max(m, Math.abs(want.grad[i] as number));
      }
      // tandem runs in f32 (activations, products): ~1e-6 relative; 1e-4 leaves room, a wrong term is O(1)
      assert.ok(d <= 1e-4 * m + 1e-7, `${e.name}: ${d} off (largest ${m})`);
    }
  },
);
