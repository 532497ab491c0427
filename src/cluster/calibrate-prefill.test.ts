import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createKernels } from '../kernels/index.js';
import { attentionFlops, layerGemmParams, openPrefillProbe, prefillRates } from './calibrate-prefill.js';

const shape = { hidden: 128, heads: 4, kvHeads: 2, headDim: 32, ff: 256, tokens: 24 };

test("the prefill probe splits a layer's time into the GEMMs, attention and the rest, on each backend", async () => {
  for (const backend of ['reference', 'wasm'] as const) {
    const kernels = await createKernels({ backend, threads: 1 });
    try {
      const probe = await openPrefillProbe(kernels, shape);
      const s = await probe.sample();
      assert.ok(s.gemmMs > 0 && s.attentionMs > 0 && s.otherMs >= 0, `${backend}: ${JSON.stringify(s)}`);
      assert.ok([s.gemmMs, s.attentionMs, s.otherMs].every(Number.isFinite), backend);
    } finally {
      await kernels.close();
    }
  }
});

test('prefill rates: FLOPs of the layer GEMMs and of causal attention over the time of each', () => {
  const r = prefillRates({ gemmMs: 2, attentionMs: 0.5, otherMs: 1.2 }, shape);
  const gemm = 2 * (2 * 128 * 4 * 32 + 2 * 128 * 2 * 32 + 3 * 128 * 256) * 24;
  assert.equal(layerGemmParams(shape) * 2 * 24, gemm);
  assert.ok(Math.abs(r.gemmFlopsPerS - gemm / 0.002) < 1e-3);
  assert.equal(attentionFlops(shape, 24), 2 * 4 * 32 * 24 * 24);
  assert.ok(Math.abs(r.attentionFlopsPerS - attentionFlops(shape, 24) / 0.0005) < 1e-3);
  assert.ok(Math.abs(r.layerTokenMs - 1.2 / 24) < 1e-12);
});
