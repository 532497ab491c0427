import { createHmac, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { TandemError } from '../../errors/index.js';

/** Below this many bytes a cluster secret is too easy to guess. */
export const minSecretBytes = 16;

/** The cluster secret from a file (trailing newline ignored) or the TANDEM_SECRET environment variable. */
export function loadSecret(file?: string, env: NodeJS.ProcessEnv = process.env): Buffer {
  let text: string | undefined;
  if (file !== undefined) {
    try {
      text = readFileSync(file, 'utf8').replace(/\r?\n$/, '');
    } catch (e) {
      throw new TandemError(
        'TOPOLOGY_BAD_SECRET',
        `cannot read the cluster secret file '${file}': ${(e as Error).message}`,
        {
          hint: 'create it once with `tandem secret --out FILE` and copy it to every host',
        },
      );
    }
  } else text = env.TANDEM_SECRET;
  if (text === undefined || Buffer.byteLength(text) < minSecretBytes) {
    throw new TandemError(
      'TOPOLOGY_BAD_SECRET',
      `the cluster secret is ${text === undefined ? 'missing' : `only ${Buffer.byteLength(text)} bytes`} (need at least ${minSecretBytes})`,
      {
        hint: 'pass --secret-file with the same file on every host, or set TANDEM_SECRET; `tandem secret --out FILE` makes a good one',
      },
    );
  }
  return Buffer.from(text);
}

export function mac(secret: Buffer, ...parts: (Buffer | string)[]): Buffer {
  const h = createHmac('sha256', secret);
  for (const p of parts) h.update(p);
  return h.digest();
}

export function macEqual(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}
