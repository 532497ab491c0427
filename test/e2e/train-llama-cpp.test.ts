import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openModel } from '../../src/engine/model/open-model.js';
import {
  hashTokens,
  paramLayout,
  train,
  trainShapes,
  writeTrainedGguf,
} from '../../src/engine/train/index.js';
import { loadWasmGemm } from '../../src/kernels/backward/gemm-wasm.js';
import { runLlamaCpp } from './llama-cpp-oracle.js';

const STEPS = 16;

function argmax(x: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < x.length; i++) if ((x[i] as number) > (x[best] as number)) best = i;
  return best;
}

/**
 * A model trained by tandem, written as GGUF, run in llama.cpp: its greedy tokens are
 * tandem's, and every step's logits agree within 1e-4 of their scale (F32: sum order only).
 */
test(
  'a tandem-trained GGUF gives llama.cpp and tandem the same greedy tokens',
  { timeout: 180_000 },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-train-llama-'));
    try {
      const shape = trainShapes.micro!;
      // a learnable sequence, so the trained model is confident (no near-ties for greedy decoding)
      const tokens = Int32Array.from({ length: 2000 }, (_, i) => 3 + ((i * 7 + (i >> 4)) % 60));
      const r = await train({
        settings: {
          shapeName: 'micro',
          shape,
          seed: 3,
          steps: 30,
          batch: 4,
          seq: 32,
          lr: 1e-2,
          warmup: 3,
          minLrRatio: 0.1,
          weightDecay: 0.1,
          clip: 1,
          dataTokens: tokens.length,
          dataHash: hashTokens(tokens),
        },
        tokens,
        gemm: await loadWasmGemm(),
      });
      const path = join(dir, 'trained.gguf');
      await writeTrainedGguf(path, paramLayout(shape), r.weights, {
        steps: 30,
        finalLoss: r.finalLoss,
        seed: 3,
        data: 'test',
      });
      const prompt = Array.from(tokens.subarray(0, 12));
      const [answer] = await runLlamaCpp(
        [{ modelPath: path, prompt, steps: STEPS, vocabSize: shape.vocab, contextSize: 64 }],
        150_000,
      );
      const theirs = answer!.steps.map(argmax);
      assert.deepEqual(answer!.greedy, theirs);
      const opened = await openModel(path, { threads: 1 });
      try {
        const cache = opened.model.newSession({ contextLength: 64 });
        let logits = await opened.model.forward(prompt, cache);
        for (let s = 0; s < STEPS; s++) {
          const want = answer!.steps[s]!;
          let d = 0;
          let m = 0;
          for (let i = 0; i < want.length; i++) {
            d = Math.max(d, Math.abs((logits[i] as number) - (want[i] as number)));
            m = Math.max(m, Math.abs(want[i] as number));
          }
          assert.ok(d / m < 1e-4, `step ${s}: logits differ by ${d} of ${m}`);
          assert.equal(argmax(logits), theirs[s], `step ${s}`);
          logits = await opened.model.forward([theirs[s]!], cache);
        }
      } finally {
        await opened.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
