import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gv, writeGguf } from '../format/gguf-writer.js';
import { planFor } from '../format/make-model.js';
import { ReferenceKernels } from '../../kernels/index.js';
import { GgufModelFile } from './gguf-model-file.js';
import { Model } from './model.js';
import type { ModelFile } from './model-file.js';
import { tinyModelFile } from './tiny-model.js';

/** A tiny llama GGUF whose metadata sets `key` to `value` while its tensors keep the planned shapes. */
async function mismatched(path: string, key: string, value: number): Promise<void> {
  const plan = planFor({ arch: 'llama', shape: 'tiny', type: 'f32' });
  const metadata = new Map(plan.metadata);
  metadata.set(key, gv.u32(value));
  await writeGguf(path, metadata, plan.tensors, (t) => new Uint8Array(t.byteLength));
}

test('metadata that disagrees with the tensors fails with MODEL_TENSOR before any buffer is sized from it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-weights-'));
  try {
    // 2^31-1 rows of 256 f32 columns would be a 2 TiB buffer: a RangeError before the shape check.
    for (const ff of [2147483647, 100000]) {
      const path = join(dir, `ff-${ff}.gguf`);
      await mismatched(path, 'llama.feed_forward_length', ff);
      const file = GgufModelFile.open(path);
      try {
        await assert.rejects(Model.load(file, new ReferenceKernels()), (e: Error & { code?: string }) => {
          assert.equal(e.code, 'MODEL_TENSOR', e.stack);
          assert.match(
            e.message,
            new RegExp(
              `tensor 'blk\\.0\\.ffn_gate\\.weight' has dims \\[256, 512\\], expected 256 columns and ${ff} rows`,
            ),
          );
          return true;
        });
      } finally {
        file.close();
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/**
 * A model file whose reads resolve a turn later and count how many overlap, as a remote file's
 * do; `failOn` rejects the reads of one tensor.
 */
function overlapping(file: ModelFile, inFlight: number, failOn?: string) {
  const seen = { now: 0, most: 0, started: 0 };
  const wrapped: ModelFile = {
    readsInFlight: inFlight,
    tensors: file.tensors,
    meta: (key) => file.meta(key),
    async readRows(name, start, count, into) {
      seen.started++;
      seen.most = Math.max(seen.most, ++seen.now);
      try {
        await new Promise((resolve) => setImmediate(resolve));
        if (name === failOn) throw new Error(`no bytes for ${name}`);
        return await file.readRows(name, start, count, into);
      } finally {
        seen.now--;
      }
    },
  };
  return { wrapped, seen };
}

test('a file that allows reads in flight loads layers at once and gives the same logits; a failed read ends the load', async () => {
  const file = tinyModelFile({ arch: 'llama', layers: 4, seed: 3 });
  const kernels = new ReferenceKernels();
  const prompt = [1, 5, 9, 2];
  const alone = await Model.load(file, kernels);
  const want = await alone.forward(prompt, alone.newSession());
  const { wrapped, seen } = overlapping(file, 2);
  const progress: number[] = [];
  const model = await Model.load(wrapped, kernels, { onLayer: (n: number) => progress.push(n) });
  assert.equal(seen.most, 2, 'two layers read at once');
  assert.deepEqual(progress, [1, 2, 3, 4]);
  assert.deepEqual(await model.forward(prompt, model.newSession()), want);

  const broken = overlapping(file, 2, 'blk.1.attn_q.weight');
  await assert.rejects(Model.load(broken.wrapped, kernels), /no bytes for blk\.1\.attn_q\.weight/);
  const started = broken.seen.started;
  await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(broken.seen.now, 0, 'no read is left running once the load has failed');
  assert.equal(broken.seen.started, started, 'no read starts after the load has failed');
  assert.ok(started < [...file.tensors.keys()].length, 'the load stopped before reading everything');
});
