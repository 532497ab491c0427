import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { makeModel } from '../../engine/format/make-model.js';
import { GgufModelFile } from '../../engine/model/gguf-model-file.js';
import { matrixShape } from '../../engine/model/model-file.js';
import { mappedTensors } from './mapped-tensors.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-mapped-'));
after(() => rmSync(dir, { recursive: true, force: true }));

describe('mapped tensors', () => {
  it("each tensor's view holds its bytes as a read gives them, mapped once per file", async () => {
    const model = join(dir, 'm.gguf');
    await makeModel(model, { arch: 'llama', shape: 'tiny', type: 'q8_0', seed: 5 });
    const file = GgufModelFile.open(model);
    try {
      const views = mappedTensors(model, file);
      if (process.platform !== 'linux' && process.platform !== 'darwin')
        return assert.equal(views, undefined);
      assert.ok(views, 'mapped on Linux and macOS');
      assert.equal(views.size, file.tensors.size);
      for (const [name, entry] of file.tensors) {
        const rows = matrixShape(entry).rows;
        assert.deepEqual(Buffer.from(views.get(name)!), Buffer.from(file.readRows(name, 0, rows)), name);
      }
      assert.equal(mappedTensors(model, file), views, 'the same mapping the second time');
    } finally {
      file.close();
    }
  });
});
