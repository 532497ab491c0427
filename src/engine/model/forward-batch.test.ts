import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeModel, type MakeModelOptions } from '../format/make-model.js';
import { openModel } from './open-model.js';
import type { KernelsBackend } from '../../kernels/types.js';

/*
 * Batch invariance of the batched decode step: each row of forwardBatch gets the logits, bit
 * for bit, that the same sequence gets from a forward of its token alone, whatever else is in
 * the batch (the server's greedy tokens then do not depend on what runs beside them).
 */

const cases: { name: string; model: MakeModelOptions; backend?: KernelsBackend; threads?: number }[] = [
  { name: 'qwen2 q8_0', model: { arch: 'qwen2', shape: 'tiny', type: 'q8_0', seed: 3 } },
  {
    name: 'qwen2 q8_0, 2 threads',
    model: { arch: 'qwen2', shape: 'tiny', type: 'q8_0', seed: 3 },
    threads: 2,
  },
  { name: 'llama q4_k_m', model: { arch: 'llama', shape: 'tiny', type: 'q4_k_m', seed: 4 } },
  { name: 'qwen3moe f16', model: { arch: 'qwen3moe', shape: 'tiny', type: 'f16', seed: 5 } },
  {
    name: 'llama q8_0 on wasm',
    model: { arch: 'llama', shape: 'tiny', type: 'q8_0', seed: 6 },
    backend: 'wasm',
  },
];

let dir = '';
before(() => {
  dir = mkdtempSync(join(tmpdir(), 'tandem-forward-batch-'));
});
after(() => rmSync(dir, { recursive: true, force: true }));

for (const c of cases) {
  test(`forwardBatch rows equal lone forwards, 12 sequences over two batches (${c.name})`, async () => {
    const path = join(dir, `${c.name.replace(/[^a-z0-9]+/gi, '-')}.gguf`);
    await makeModel(path, c.model);
    const opened = await openModel(path, {
      threads: c.threads ?? 1,
      tokenizer: false,
      ...(c.backend ? { backend: c.backend } : {}),
    });
    try {
      const { model } = opened;
      // 12 sequences (past one batch of 11) with prompts of different lengths, so rows sit at different positions
      const prompts = Array.from({ length: 12 }, (_, i) =>
        Array.from({ length: 1 + ((i * 7) % 13) }, (_, j) => (i * 97 + j * 31) % 4000),
      );
      const alone = prompts.map(() => model.newSession({ contextLength: 64 }));
      const batched = prompts.map(() => model.newSession({ contextLength: 64 }));
      let next: number[] = [];
      for (const [i, p] of prompts.entries()) {
        await model.forward(p, alone[i]!);
        await model.forward(p, batched[i]!);
        next.push((i * 13) % 4000);
      }
      for (let step = 0; step < 3; step++) {
        // a different mix each step: all 12, then the odd ones, then the first 5
        const rows = prompts.map((_, i) => i).filter((i) => step === 0 || (step === 1 ? i % 2 === 1 : i < 5));
        const got = await model.forwardBatch(
          rows.map((i) => next[i]!),
          rows.map((i) => batched[i]!),
        );
        for (const [r, i] of rows.entries()) {
          const want = await model.forward([next[i]!], alone[i]!);
          assert.deepEqual(got[r], want, `sequence ${i}, step ${step}`);
          assert.equal(batched[i]!.length, alone[i]!.length);
        }
        next = next.map((t) => (t * 5 + 1) % 4000);
      }
    } finally {
      await opened.close();
    }
  });
}

for (const c of cases) {
  test(`forwardMixed equals forward and forwardBatch (${c.name})`, async () => {
    const path = join(dir, `mixed-${c.name.replace(/[^a-z0-9]+/gi, '-')}.gguf`);
    await makeModel(path, c.model);
    const opened = await openModel(path, {
      threads: c.threads ?? 1,
      tokenizer: false,
      ...(c.backend ? { backend: c.backend } : {}),
    });
    try {
      const { model } = opened;
      const alone = [0, 1, 2].map(() => model.newSession({ contextLength: 64 }));
      const mixed = [0, 1, 2].map(() => model.newSession({ contextLength: 64 }));
      for (let i = 0; i < 3; i++) {
        await model.forward([i + 1, i + 2], alone[i]!);
        await model.forward([i + 1, i + 2], mixed[i]!);
      }
      for (const p of [4, 15]) {
        const prompt = Array.from({ length: p }, (_, j) => (j * 31 + p) % 4000);
        const next = [7, 8, 9].map((t) => t + p);
        const wantCache = model.newSession({ contextLength: 64 });
        const wantPrefill = await model.forward(prompt, wantCache);
        const wantDecode = await model.forwardBatch(next, alone);
        const got = await model.forwardMixed(
          { tokens: prompt, cache: model.newSession({ contextLength: 64 }) },
          { tokens: next, caches: mixed },
        );
        assert.deepEqual(got.prefill, wantPrefill, `prefill of ${p}`);
        assert.deepEqual(got.decode, wantDecode, `rows beside a prefill of ${p}`);
      }
    } finally {
      await opened.close();
    }
  });
}
