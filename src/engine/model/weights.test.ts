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
