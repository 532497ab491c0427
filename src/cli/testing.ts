import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';

export { tempModel } from '../engine/testing/temp-model.js';

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
