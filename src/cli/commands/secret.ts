import { randomBytes } from 'node:crypto';
import { closeSync, constants, fchmodSync, openSync, writeSync } from 'node:fs';
import { defineCommand } from '../options.js';
import { TandemError } from '../../errors/index.js';

/** 32 random bytes as 64 hex characters: text that survives copying between hosts, 4x the 16-byte minimum. */
export function newSecret(): string {
  return randomBytes(32).toString('hex');
}

export const command = defineCommand({
  name: 'secret',
  summary: 'write a new random cluster secret (to a file only you can read, or stdout)',
  description:
    'Every host of a cluster needs the same secret: `tandem node`, `tandem run --hosts`, `tandem bench cluster --hosts`, `tandem init` and `tandem topology --discover` read it from --secret-file FILE or TANDEM_SECRET. ' +
    'With --out the file is created with mode 0600 (an existing file is kept unless --force); copy it to every host (scp keeps it private). ' +
    'The secret authenticates; it does not encrypt (docs/security.md).',
  options: {
    out: {
      type: 'string',
      description: 'write the secret to this file (mode 0600) instead of stdout',
      placeholder: 'FILE',
    },
    force: { type: 'boolean', description: 'with --out: replace an existing file' },
  },
  examples: [
    'tandem secret --out ~/.config/tandem/cluster.secret',
    'scp ~/.config/tandem/cluster.secret m2.local:.config/tandem/',
  ],
  async run({ options }) {
    const secret = newSecret();
    if (options.out === undefined) {
      if (options.force)
        throw new TandemError('CLI_USAGE', 'secret: --force needs --out', {
          hint: 'add --out FILE, or drop --force',
        });
      process.stdout.write(secret + '\n');
      return 0;
    }
    const flags =
      constants.O_WRONLY | constants.O_CREAT | (options.force ? constants.O_TRUNC : constants.O_EXCL);
    let fd: number;
    try {
      fd = openSync(options.out, flags, 0o600);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      throw new TandemError(
        'INVALID_ARGUMENT',
        `secret: cannot create ${options.out}: ${(e as Error).message}`,
        {
          hint:
            code === 'EEXIST'
              ? 'keep the existing secret (every host must share it), or pass --force to replace it'
              : 'give a path in a directory you can write to',
          details: { file: options.out },
        },
      );
    }
    try {
      // --force over an existing file keeps its mode through O_TRUNC: set it.
      fchmodSync(fd, 0o600);
      writeSync(fd, secret + '\n');
    } finally {
      closeSync(fd);
    }
    process.stderr.write(`wrote a new cluster secret to ${options.out} (mode 0600); copy it to every host\n`);
    return 0;
  },
});
