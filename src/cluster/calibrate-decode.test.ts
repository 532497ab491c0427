import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createKernels, GgmlType, rowBytes } from '../kernels/index.js';
import { decodeProbeLayers, decodeRates, layerQ8Bytes, openDecodeProbe } from './calibrate-decode.js';

const shape = { hidden: 128, heads: 4, kvHeads: 2, headDim: 32, ff: 256, tokens: 24 };

test("the decode probe splits a layer's step into its weights' matvecs, attention and the rest, on each backend", async () => {
  for (const backend of ['reference', 'wasm'] as const) {
    const kernels = await createKernels({ backend, threads: 1 });
    try {
      const probe = await openDecodeProbe(kernels, shape, 2);
      const s = await probe.sample();
      assert.ok(s.weightsMs > 0 && s.attentionMs > 0 && s.otherMs >= 0, `${backend}: ${JSON.stringify(s)}`);
      // a Llama layer's step: norms, RoPE, the KV store, attention and at least 4 matvecs
      assert.ok(s.callsPerLayer >= 9, `${backend}: ${s.callsPerLayer} calls a layer`);
      assert.ok([s.weightsMs, s.attentionMs, s.otherMs].every(Number.isFinite), backend);
    } finally {
      await kernels.close();
    }
  }
});

test("decode rates: a layer's Q8_0 bytes over its matvecs' time, and the rest of the layer", () => {
  const q8 = (rows: number, cols: number): number => rows * rowBytes(GgmlType.Q8_0, cols);
  const bytes = 2 * q8(128, 128) + 2 * q8(64, 128) + 3 * q8(256, 128);
  assert.equal(layerQ8Bytes(shape), bytes);
  const r = decodeRates({ weightsMs: 2, attentionMs: 0.25, otherMs: 0.5, callsPerLayer: 20 }, shape);
  assert.ok(Math.abs(r.layerBytesPerS - bytes / 0.002) < 1e-6);
  assert.equal(r.layerOverheadMs, 0.75);
});

test('the decode probe holds enough layers to stream from memory, not from cache', () => {
  const tinyllama = { hidden: 2048, heads: 32, kvHeads: 4, headDim: 64, ff: 5632, tokens: 128 };
  const layers = decodeProbeLayers(tinyllama);
  assert.ok(layers * layerQ8Bytes(tinyllama) >= 512 << 20);
  assert.ok((layers - 1) * layerQ8Bytes(tinyllama) < 512 << 20);
  assert.equal(decodeProbeLayers({ ...tinyllama, hidden: 16384, ff: 53248 }), 1);
  assert.equal(decodeProbeLayers(shape), 64);
});
