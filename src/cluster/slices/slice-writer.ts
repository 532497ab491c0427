import type { FileHandle } from 'node:fs/promises';
import { writeFileAtomically } from '../../engine/format/atomic-file.js';

/** A slice as it arrived: its pieces' lengths and SHA-256 (as the coordinator sent them). */
export interface SliceChunks {
  lengths: number[];
  hashes: string[];
}

export const SLICE_MAGIC = 0x54534c31; // 'TSL1'

/** Bytes of a cache entry's table for `pieces` pieces: `[magic u32][chunks u32]([length u32][sha256 32 bytes])*`. */
export function tableBytes(pieces: number): number {
  return 8 + pieces * 36;
}

/** The table in front of a cache entry's bytes. */
export function sliceTable(chunks: SliceChunks): Buffer {
  const head = Buffer.alloc(tableBytes(chunks.lengths.length));
  head.writeUInt32BE(SLICE_MAGIC, 0);
  head.writeUInt32BE(chunks.lengths.length, 4);
  chunks.lengths.forEach((length, c) => {
    head.writeUInt32BE(length, 8 + c * 36);
    Buffer.from(chunks.hashes[c] as string, 'hex').copy(head, 12 + c * 36);
  });
  return head;
}

/**
 * One cache entry written while its slice arrives: each piece, once checked, is written at its
 * place behind a table sized for the `pieces` the coordinator's grid cuts the rows into (on the
 * thread pool, while the next piece is received), and `finish` writes the table, so the entry
 * costs no write after the last piece but its own. It goes through a temporary file renamed
 * into place (writeFileAtomically): a failed, aborted or killed write leaves no entry. A slice
 * that came in another number of pieces is written again whole at `finish`.
 */
export class SliceWriter {
  private readonly file: Promise<FileHandle>;
  private readonly writes: Promise<void>[] = [];
  private failure: unknown;
  private settle!: {
    done: (c: { chunks: SliceChunks; data: Uint8Array }) => void;
    abort: (e: Error) => void;
  };
  /** Resolves once the entry is in place; rejects when it could not be written or was aborted. */
  readonly written: Promise<void>;

  constructor(
    path: string,
    private readonly pieces: number,
  ) {
    let opened!: (f: FileHandle) => void;
    this.file = new Promise((resolve) => (opened = resolve));
    const ended = new Promise<{ chunks: SliceChunks; data: Uint8Array }>((done, abort) => {
      this.settle = { done, abort };
    });
    // an abort before the file is open is seen once it is; never an unhandled rejection
    ended.catch(() => undefined);
    this.written = writeFileAtomically(path, async (f) => {
      opened(f);
      const { chunks, data } = await ended;
      await Promise.all(this.writes);
      if (this.failure !== undefined) throw this.failure;
      const table = sliceTable(chunks);
      if (chunks.lengths.length !== this.pieces) {
        await f.truncate(0);
        await f.write(data, 0, data.length, table.length);
      }
      await f.write(table, 0, table.length, 0);
    });
    // a failure is reported through finish or swallowed by abort
    this.written.catch(() => undefined);
  }

  /** Writes `data` (checked against its hash), the slice's bytes from `offset`; `data` must not change until `finish`. */
  piece(offset: number, data: Uint8Array): void {
    const at = tableBytes(this.pieces) + offset;
    this.writes.push(
      this.file
        .then((f) => f.write(data, 0, data.length, at))
        .then(
          () => undefined,
          (e: unknown) => {
            this.failure ??= e;
          },
        ),
    );
  }

  /** Completes the entry: its table, after every piece; `data` is the whole slice. */
  finish(chunks: SliceChunks, data: Uint8Array): Promise<void> {
    this.settle.done({ chunks, data });
    return this.written;
  }

  /** Drops the entry (its temporary file removed); resolves once nothing of it is written any more. */
  async abort(why: Error): Promise<void> {
    this.settle.abort(why);
    await this.written.catch(() => undefined);
  }
}
