import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runJsonChild } from '../util/json-child.js';
import { TandemError } from '../errors/index.js';

/** How long a child may take to set its sampler up (512 MiB uploaded), and to sample. */
const SETUP_MS = 120_000;

/**
 * What the host streams with `processes` separate processes of `threads` each reading weights
 * at once, as that many local nodes do: bytes a second in all, one figure per sample (the sum
 * of the processes' samples taken in the same window: they start together and each sample
 * lasts the same time). One process with processes x threads threads is not the same: its
 * threads meet at every call's barrier, where separate nodes do not.
 */
export async function concurrentStreamSamples(
  processes: number,
  threads: number,
  count: number,
): Promise<number[]> {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-stream-'));
  const child = fileURLToPath(new URL('./stream-child.ts', import.meta.url));
  let failed: unknown;
  try {
    const runs = Array.from({ length: processes }, (_, id) =>
      runJsonChild<number[]>(
        child,
        { threads, count, dir, id, waitMs: SETUP_MS },
        { timeoutMs: 2 * SETUP_MS, what: `stream probe ${id + 1} of ${processes}` },
      ).catch((e: unknown) => {
        failed ??= e;
        return [] as number[];
      }),
    );
    const until = Date.now() + SETUP_MS;
    while (readdirSync(dir).filter((f) => f.startsWith('ready-')).length < processes) {
      if (failed !== undefined) break;
      if (Date.now() > until) {
        failed = new Error(`the stream probes were not ready within ${SETUP_MS} ms`);
        break;
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    // go also when one failed: the others stop waiting and end
    writeFileSync(join(dir, 'go'), '');
    const all = await Promise.all(runs);
    if (failed !== undefined)
      throw new TandemError(
        'INTERNAL',
        `the ${processes} concurrent stream probes failed: ${(failed as Error).message}`,
        { hint: 'run `tandem plan --calibrate` alone to see whether this machine can probe at all' },
      );
    return Array.from({ length: count }, (_, i) => all.reduce((a, s) => a + (s[i] as number), 0));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
