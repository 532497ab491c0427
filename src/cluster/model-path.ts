import { accessSync, constants, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { TandemError } from '../errors/index.js';

/**
 * The model path a coordinator sends to its nodes: absolute (a relative path would be
 * resolved against each node's own working directory), and checked here, before any node is
 * started or contacted, to exist and be readable. Each node still opens it at that path, so
 * the file must be at the same absolute path on every host.
 */
export function resolveModelPath(path: string): string {
  const absolute = resolve(path);
  let directory: boolean;
  try {
    directory = statSync(absolute).isDirectory();
    accessSync(absolute, directory ? constants.R_OK | constants.X_OK : constants.R_OK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const missing = code === 'ENOENT' || code === 'ENOTDIR';
    throw new TandemError(
      'MODEL_FORMAT_NOT_FOUND',
      `model ${absolute}${absolute === path ? '' : ` (from '${path}')`} ${missing ? 'does not exist' : `cannot be read: ${(e as Error).message}`}`,
      {
        hint: missing
          ? 'check the path; `tandem make-model OUT.gguf` writes a test model'
          : 'make the file readable by this user',
        details: { file: absolute, ...(code ? { errno: code } : {}) },
      },
    );
  }
  return absolute;
}
