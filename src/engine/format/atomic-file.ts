import { lstatSync, readdirSync, realpathSync, rmSync, statSync, type Stats } from 'node:fs';
import { open, rename, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { TandemError } from '../../errors/index.js';
import { onInterrupt } from '../../util/on-interrupt.js';
import { fileKind } from './byte-source.js';

/**
 * Writes `path` through a temporary file in the same directory, renamed over `path` only once
 * `write` has succeeded: a failed, interrupted or killed write never leaves a truncated file
 * at `path` (a later load would fail on it). The temporary file is removed on error and on
 * SIGINT/SIGTERM; the signal then takes its default course (exit 130/143) unless another
 * listener handles it, in which case `signal` aborts the write. Only SIGKILL leaves
 * `<path>.<pid>.tmp` behind; the next write of `path` removes it (removeStaleTemporaries).
 */
export async function writeFileAtomically<T>(
  path: string,
  write: (file: FileHandle, signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const target = destination(path);
  removeStaleTemporaries(dirname(target), basename(target));
  const tmp = `${target}.${process.pid}.tmp`;
  const aborter = new AbortController();
  const removeHandlers = onInterrupt((signal) => {
    rmSync(tmp, { force: true });
    aborter.abort(
      new TandemError('ABORTED', `writing ${path} was interrupted by ${signal}; removed the partial file`, {
        hint: 'run the command again',
        details: { file: path, signal },
      }),
    );
  });
  let file: FileHandle | undefined;
  try {
    file = await open(tmp, 'w').catch((e: unknown) => {
      throw writeError(path, e, `cannot create the temporary file ${tmp}`);
    });
    const result = await write(file, aborter.signal).catch((e: unknown) => {
      throw writeError(path, e, 'cannot write it');
    });
    await file.close();
    file = undefined;
    aborter.signal.throwIfAborted();
    await rename(tmp, target).catch((e: unknown) => {
      throw writeError(path, e, `cannot rename ${tmp} to it`);
    });
    return result;
  } catch (error) {
    await file?.close().catch(() => undefined);
    rmSync(tmp, { force: true });
    throw error;
  } finally {
    removeHandlers();
  }
}

/** Whether process `pid` exists on this machine (EPERM: it does, owned by another user). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Removes the temporary files `<name>.<pid>.tmp` in `dir` (every name when `name` is absent)
 * whose writer is gone: what a SIGKILLed write left behind. A live pid's file is kept, since
 * it may be a write in progress; a pid reused since only keeps a stale file, never removes a
 * live one. Returns the removed paths; a directory that cannot be listed removes nothing.
 */
export function removeStaleTemporaries(dir: string, name?: string): string[] {
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const entry of entries) {
    const m = /^(.+)\.(\d+)\.tmp$/.exec(entry);
    if (!m || (name !== undefined && m[1] !== name)) continue;
    const pid = Number(m[2]);
    if (pid === process.pid || alive(pid)) continue;
    const path = join(dir, entry);
    try {
      if (!lstatSync(path).isFile()) continue;
      rmSync(path, { force: true });
      removed.push(path);
    } catch {
      // gone already, or not ours to remove: the write goes on without it
    }
  }
  return removed;
}

/**
 * The file to replace: `path` itself, or the file a symlink at `path` points to. Refuses an
 * empty path, a missing or non-directory parent, and anything but a regular file at `path`
 * (renaming over a directory fails late, and over a device such as /dev/full would replace it).
 */
function destination(path: string): string {
  if (path === '') {
    throw new TandemError('INVALID_ARGUMENT', 'the output path is empty', {
      hint: 'give the path of the file to write, for example /tmp/model.gguf',
    });
  }
  const existing = statOf(path);
  if (existing !== undefined) {
    if (!existing.isFile()) {
      throw new TandemError(
        'MODEL_FORMAT_IO',
        `cannot write ${path}: it exists and is ${fileKind(existing)}, not a regular file`,
        {
          hint: existing.isDirectory()
            ? `give a file path inside it, for example ${path.replace(/\/+$/, '')}/model.gguf`
            : 'give the path of a regular file to write',
          details: { file: path },
        },
      );
    }
    return lstatSync(path).isSymbolicLink() ? realpathSync(path) : path;
  }
  const dir = dirname(path);
  const parent = statOf(dir);
  if (parent === undefined || !parent.isDirectory()) {
    throw new TandemError(
      'MODEL_FORMAT_IO',
      `cannot write ${path}: ${dir} ${parent === undefined ? 'does not exist' : `is ${fileKind(parent)}, not a directory`}`,
      {
        hint:
          parent === undefined
            ? `create the directory first (mkdir -p ${dir}) or write elsewhere`
            : 'give a path inside an existing directory',
        details: { file: path, dir },
      },
    );
  }
  return path;
}

function statOf(path: string): Stats | undefined {
  try {
    return statSync(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    throw writeError(path, error, 'cannot inspect it');
  }
}

const HINTS: Record<string, string> = {
  ENOSPC: 'free space on that filesystem or write the file to another one',
  EDQUOT: 'free space within your disk quota or write the file elsewhere',
  EFBIG: 'the file is larger than that filesystem or a ulimit allows; write it elsewhere',
  EACCES: 'choose a directory you can write to',
  EPERM: 'choose a directory you can write to',
  EROFS: 'that filesystem is read-only; choose a writable directory',
  ENOENT: 'check that the directory exists and accepts new files (/proc and /sys do not)',
  ENOTDIR: 'a component of the path is not a directory; check the path',
};

/** A system call's error while writing `path` as a typed error naming it; any other error passes through. */
export function writeError(path: string, error: unknown, what: string): unknown {
  if (error instanceof TandemError) return error;
  const { code, syscall } = error as NodeJS.ErrnoException;
  if (typeof code !== 'string' || syscall === undefined) return error;
  return new TandemError('MODEL_FORMAT_IO', `cannot write ${path}: ${what}: ${(error as Error).message}`, {
    hint: HINTS[code] ?? 'check the path and that its directory is writable',
    details: { file: path, errno: code },
    cause: error,
  });
}
