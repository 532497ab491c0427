import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { TandemError } from '../errors/index.js';

/**
 * The model that ships in the repository (models/, its recipe in models/README.md): what
 * `tandem serve` answers with when no MODEL is given, so a first request needs no download.
 */
export const EMBEDDED_MODEL = {
  path: join(import.meta.dirname, '..', '..', 'models', 'tandem-tiny.gguf'),
  name: 'tandem-tiny',
  /** What it is and what it is not, for --help and the first lines a user sees. */
  about:
    'tandem-tiny: a 3.7M-parameter llama (4 layers, width 256, Q8_0, 4.5 MB) trained for 40 minutes on this ' +
    "project's build machine, on the Markdown shipped in npm packages and Debian's license texts. It writes fluent " +
    'fragments of such text; it knows nothing and follows no instructions (models/README.md)',
} as const;

/** The embedded model's path; a checkout without models/ (a trimmed package) says so instead of failing later. */
export function embeddedModelPath(command: string): string {
  if (!existsSync(EMBEDDED_MODEL.path))
    throw new TandemError('CLI_USAGE', `${command}: no MODEL given and the embedded model is missing`, {
      hint: `pass a .gguf file, or restore ${EMBEDDED_MODEL.path} (git checkout models/)`,
      details: { path: EMBEDDED_MODEL.path },
    });
  return EMBEDDED_MODEL.path;
}
