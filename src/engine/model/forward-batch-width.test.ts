import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeModel } from '../format/make-model.js';
import { openModel } from './open-model.js';
import { prefillPiece } from './prefill.js';
import { wideModelShape } from './wide-model.js';
import type { KernelsBackend } from '../../kernels/types.js';

/*
 * Batch invariance at a real width: a one-layer Q8_0 model of TinyLlama's width (wide-model.ts),
 * where the native VNNI kernels take their multi-token path over many block pairs per row (the
 * order a row's sums are added in then shows in the last bits; the tiny models of
 * forward-batch.test.ts are too narrow to show it). Every batch size 1..8 gives each row the
 * logits, bit for bit, of a forward of its token alone. src/kernels/matvec-rows.test.ts holds
 * every weight type to the same at the kernel level.
 */

let dir = '';
let path = '';
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tandem-forward-batch-width-'));
  path = join(dir, 'wide-q8_0.gguf');
  await makeModel(path, { arch: 'llama', shape: wideModelShape, type: 'q8_0', seed: 11 });
});
after(() => rmSync(dir, { recursive: true, force: true }));

for (const backend of ['native', 'wasm'] as KernelsBackend[]) {
  test(`forwardBatch rows equal lone forwards at width 2048, batches of 1..8 (q8_0, ${backend})`, async (t) => {
    const opened = await openModel(path, { threads: 2, tokenizer: false, backend }).catch(() => undefined);
    if (!opened) return t.skip(`no ${backend} kernels here`);
    try {
      const { model } = opened;
      const prompts = Array.from({ length: 8 }, (_, i) =>
        Array.from({ length: 1 + ((i * 5) % 7) }, (_, j) => (i * 97 + j * 31) % 2048),
      );
      const alone = prompts.map(() => model.newSession({ contextLength: 32 }));
      const batched = prompts.map(() => model.newSession({ contextLength: 32 }));
      for (const [i, p] of prompts.entries()) {
        await model.forward(p, alone[i]!);
        await model.forward(p, batched[i]!);
      }
      for (let n = 1; n <= 8; n++) {
        // n sequences, a different mix for each n
        const rows = Array.from({ length: n }, (_, r) => (r + n) % 8);
        const next = rows.map((i) => (i * 13 + n * 7) % 2048);
        const got = await model.forwardBatch(
          next,
          rows.map((i) => batched[i]!),
        );
        for (const [r, i] of rows.entries()) {
          const want = await model.forward([next[r]!], alone[i]!);
          assert.deepEqual(got[r], want, `batch of ${n}, sequence ${i}`);
        }
      }
    } finally {
      await opened.close();
    }
  });
}

test('a prompt prefilled in pieces (prefillPiece, any chunk) gives the logits of one forward (q8_0, width 2048)', async () => {
  const opened = await openModel(path, { threads: 2, tokenizer: false });
  try {
    const { model } = opened;
    for (const length of [5, 12, 40, 71]) {
      const prompt = Array.from({ length }, (_, j) => (j * 53 + 3) % 2048);
      const whole = await model.forward(prompt, model.newSession({ contextLength: 96 }));
      for (const chunk of [1, 12, 24, 30]) {
        const cache = model.newSession({ contextLength: 96 });
        let last: Float32Array | undefined;
        for (let at = 0; at < length;) {
          const n = prefillPiece(length - at, chunk);
          assert.ok(n >= Math.min(12, length), `piece of ${n}`);
          last = await model.forward(prompt.slice(at, at + n), cache);
          at += n;
        }
        assert.deepEqual(last, whole, `${length} tokens in pieces of about ${chunk}`);
      }
    }
  } finally {
    await opened.close();
  }
});

for (const backend of ['native', 'wasm'] as KernelsBackend[]) {
  test(`forwardMixed (a prefill piece and decode rows in one forward) equals forward and forwardBatch (q8_0, ${backend})`, async (t) => {
    const opened = await openModel(path, { threads: 2, tokenizer: false, backend }).catch(() => undefined);
    if (!opened) return t.skip(`no ${backend} kernels here`);
    try {
      const { model } = opened;
      const decoders = Array.from({ length: 8 }, (_, i) => [i * 7 + 1, i * 3 + 2].slice(0, 1 + (i % 2)));
      const alone = decoders.map(() => model.newSession({ contextLength: 96 }));
      const mixed = decoders.map(() => model.newSession({ contextLength: 96 }));
      for (const [i, p] of decoders.entries()) {
        await model.forward(p, alone[i]!);
        await model.forward(p, mixed[i]!);
      }
      for (const [step, [p, d]] of [
        [5, 3],
        [12, 1],
        [40, 8],
        [13, 4],
      ].entries()) {
        const prompt = Array.from({ length: p! }, (_, j) => (j * 41 + step) % 2048);
        const rows = Array.from({ length: d! }, (_, r) => (r + step) % 8);
        const next = rows.map((i) => (i * 17 + step) % 2048);
        const wantCache = model.newSession({ contextLength: 96 });
        const wantPrefill = await model.forward(prompt, wantCache);
        const wantDecode = await model.forwardBatch(
          next,
          rows.map((i) => alone[i]!),
        );
        const gotCache = model.newSession({ contextLength: 96 });
        const got = await model.forwardMixed(
          { tokens: prompt, cache: gotCache },
          { tokens: next, caches: rows.map((i) => mixed[i]!) },
        );
        assert.deepEqual(got.prefill, wantPrefill, `prefill of ${p} beside ${d} rows`);
        assert.deepEqual(got.decode, wantDecode, `${d} rows beside a prefill of ${p}`);
        // the caches hold the same: the next token of each gives the same logits
        assert.deepEqual(await model.forward([3], gotCache), await model.forward([3], wantCache));
      }
    } finally {
      await opened.close();
    }
  });
}
