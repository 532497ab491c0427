import { closeSync, fstatSync, openSync, readSync, statSync, type Stats } from 'node:fs';
import { TandemError } from '../../errors/index.js';

/**
 * Random access to a model file's bytes. Readers ask for exactly the ranges they parse, so a
 * shard loading a slice never reads the rest of the file.
 */
export interface ByteSource {
  /** Name used in error messages (the path). */
  readonly name: string;
  readonly size: number;
  /** Copies `length` bytes at `offset` into `into` (from its start); the caller checks bounds. */
  readInto(offset: number, length: number, into: Uint8Array): void;
  close(): void;
}

export class BufferSource implements ByteSource {
  readonly size: number;
  constructor(
    private readonly bytes: Uint8Array,
    readonly name = '<buffer>',
  ) {
    this.size = bytes.length;
  }
  readInto(offset: number, length: number, into: Uint8Array): void {
    into.set(this.bytes.subarray(offset, offset + length));
  }
  close(): void {}
}

export class FileSource implements ByteSource {
  readonly size: number;
  private fd: number | undefined;

  constructor(readonly name: string) {
    // Stat before open: opening a FIFO blocks until a writer appears, and a directory opens
    // fine but fails on the first read with EISDIR.
    notRegularFile(name, statOrThrow(name));
    try {
      this.fd = openSync(name, 'r');
      const stats = fstatSync(this.fd);
      notRegularFile(name, stats);
      this.size = stats.size;
    } catch (error) {
      if (this.fd !== undefined) closeSync(this.fd);
      this.fd = undefined;
      if (error instanceof TandemError) throw error;
      throw openError(name, error);
    }
  }

  readInto(offset: number, length: number, into: Uint8Array): void {
    if (this.fd === undefined) {
      throw new TandemError('MODEL_FORMAT_IO', `${this.name} is already closed`, {
        hint: 'open the model file again',
      });
    }
    let done = 0;
    while (done < length) {
      const n = readSync(this.fd, into, done, length - done, offset + done);
      if (n === 0) {
        throw new TandemError(
          'MODEL_FORMAT_IO',
          `${this.name}: unexpected end of file at byte ${offset + done} (the file shrank while open?)`,
          {
            hint: 'do not modify a model file while it is being read',
            details: { file: this.name, offset: offset + done },
          },
        );
      }
      done += n;
    }
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}

function openError(name: string, error: unknown): TandemError {
  return new TandemError('MODEL_FORMAT_IO', `cannot open model file ${name}: ${(error as Error).message}`, {
    hint: 'check the path and that the file is readable',
    details: { file: name },
    cause: error,
  });
}

function statOrThrow(name: string): Stats {
  try {
    return statSync(name);
  } catch (error) {
    throw openError(name, error);
  }
}

/** Throws unless `stats` is a regular file (a model is never a directory, FIFO, socket or device). */
function notRegularFile(name: string, stats: Stats): void {
  if (stats.isFile()) return;
  const kind = fileKind(stats);
  throw new TandemError(
    'MODEL_FORMAT_IO',
    `cannot open model file ${name}: it is ${kind}, not a regular file`,
    {
      hint: stats.isDirectory()
        ? 'pass the path of the model file inside the directory (for example model.gguf)'
        : 'pass the path of a regular model file (.gguf or .safetensors)',
      details: { file: name, kind },
    },
  );
}

/** What a path that is not a regular file is, for messages: 'a directory', 'a FIFO (named pipe)', ... */
export function fileKind(s: Stats): string {
  if (s.isDirectory()) return 'a directory';
  if (s.isFIFO()) return 'a FIFO (named pipe)';
  if (s.isSocket()) return 'a socket';
  if (s.isCharacterDevice() || s.isBlockDevice()) return 'a device';
  return 'a special file';
}
