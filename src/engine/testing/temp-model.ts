import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { makeModel, type MakeModelOptions } from '../format/make-model.js';

/**
 * A generated model file for the tests of one file: made in a temporary directory before
 * they run, removed after. Returns the file's path (valid once the tests run).
 */
export function tempModel(prefix: string, options: MakeModelOptions): () => string {
  let dir = '';
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), prefix));
    await makeModel(join(dir, 'model.gguf'), options);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));
  return () => join(dir, 'model.gguf');
}
