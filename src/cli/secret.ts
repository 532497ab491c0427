import { TandemError } from '../errors/index.js';
import { loadSecret } from '../topology/index.js';
import type { OptionTable } from './options.js';

/**
 * The one secret rule of every command that joins a cluster (node, run --hosts, bench cluster
 * --hosts, topology --discover, init): the secret comes from --secret-file or TANDEM_SECRET
 * and has at least 16 bytes (topology/discovery/secret.ts checks both). `--secret STRING` is
 * refused rather than warned about: a command line is readable by every user of the machine
 * (`ps`) and stays in shell history, and a warning would leave the documented habit working.
 */
export const secretOptions = {
  'secret-file': {
    type: 'string',
    description:
      'file holding the cluster secret (at least 16 bytes, the same on every host; `tandem secret --out FILE` makes one); default: TANDEM_SECRET',
    placeholder: 'FILE',
  },
  secret: {
    type: 'string',
    description: 'refused: a secret on the command line shows in `ps`; use --secret-file or TANDEM_SECRET',
    placeholder: 'refused',
  },
} as const satisfies OptionTable;

export interface SecretOptions {
  'secret-file'?: string | undefined;
  secret?: string | undefined;
}

/** Refuses `--secret STRING` with what to do instead. */
export function refuseSecretArgument(command: string, options: SecretOptions): void {
  if (options.secret === undefined) return;
  throw new TandemError(
    'CLI_USAGE',
    `${command}: --secret is refused: a secret on the command line is visible to every user in \`ps\` and stays in shell history`,
    {
      hint: 'write it to a file readable only by you (`tandem secret --out ~/.config/tandem/cluster.secret`) and pass --secret-file FILE, or set TANDEM_SECRET',
    },
  );
}

/** The cluster secret by the one rule (above), as the text the cluster's HMACs are keyed with. */
export function clusterSecret(
  command: string,
  options: SecretOptions,
  env: NodeJS.ProcessEnv = process.env,
): string {
  return clusterSecretBytes(command, options, env).toString('utf8');
}

/** The same, as bytes (discovery keys its HMACs with a Buffer). */
export function clusterSecretBytes(
  command: string,
  options: SecretOptions,
  env: NodeJS.ProcessEnv = process.env,
): Buffer {
  refuseSecretArgument(command, options);
  return loadSecret(options['secret-file'], env);
}
