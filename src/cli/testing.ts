import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before } from 'node:test';
import { makeModel, type MakeModelOptions } from '../engine/format/make-model.js';

/** The CLI's entry point. */
export const tandemBin = resolve(import.meta.dirname, '..', '..', 'bin', 'tandem.js');

/**
 * Runs the CLI in a child process and returns how it ended (tests: the --test runner's stdout
 * protocol breaks tests that capture this process's stdout). `env` replaces the environment.
 */
export function runTandem(
  args: readonly string[],
  o: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [tandemBin, ...args], {
    encoding: 'utf8',
    timeout: o.timeoutMs ?? 120_000,
    ...(o.env ? { env: o.env } : {}),
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

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
