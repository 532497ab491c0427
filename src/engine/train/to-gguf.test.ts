import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openModel } from '../model/open-model.js';
import { referenceGemm } from '../../kernels/backward/gemm.js';
import { LlamaGrad } from './llama-grad.js';
import { trainShapes } from './shapes.js';
import { testWeights } from './testing.js';
import { trainingTokenizer, writeTrainedGguf } from './to-gguf.js';

test('the written GGUF runs in the engine with the logits of the training forward pass', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-train-gguf-'));
  try {
    const { layout, weights } = testWeights(trainShapes.micro!, 11);
    const out = join(dir, 'm.gguf');
    await writeTrainedGguf(out, layout, weights, { steps: 0, finalLoss: 0, seed: 0, data: 'test' });
    const tokens = trainingTokenizer(layout).encode('a small test of the written model', { addBos: true });
    const seq = tokens.length;
    const acts = new LlamaGrad(layout, weights, referenceGemm).forward([...tokens, 0], 1, seq);
    const want = acts.logits.subarray((seq - 1) * layout.shape.vocab);
    const opened = await openModel(out, { backend: 'reference', threads: 1 });
    try {
      const got = await opened.model.forward(tokens, opened.model.newSession({ contextLength: 64 }));
      let d = 0;
      let m = 0;
      for (let i = 0; i < want.length; i++) {
        d = Math.max(d, Math.abs((got[i] as number) - (want[i] as number)));
        m = Math.max(m, Math.abs(want[i] as number));
      }
      // both f32, different sum orders and RoPE angle rounding: ~1e-6 of the logit scale
      assert.ok(d / m < 1e-4, `logits differ by ${d} of ${m}`);
      assert.deepEqual(
        opened.tokenizer?.encode('a small test', { addBos: true }),
        trainingTokenizer(layout).encode('a small test', { addBos: true }),
      );
    } finally {
      await opened.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
