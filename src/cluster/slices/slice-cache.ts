import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { removeStaleTemporaries } from '../../engine/format/atomic-file.js';
import { cacheDir, ensureCacheDir } from '../demo.js';
import { sha256 } from './manifest.js';
import { SLICE_MAGIC, SliceWriter } from './slice-writer.js';

/**
 * A member's slices received from coordinators, one file per slice under
 * TANDEM_CACHE_DIR/slices, named by the content hash of its tensor and its row range: the same
 * tensor of any model file (whatever its path) finds it again. A file holds
 * `[magic u32][chunks u32]([length u32][sha256 32 bytes])*` then the bytes (slice-writer.ts); each piece is
 * checked against its hash on every read, so a corrupted entry is detected, removed and fetched
 * again, never used. Entries are written through a temporary file renamed into place; the
 * temporaries a killed member left are removed when the cache opens.
 */
export class SliceCache {
  readonly dir: string;

  constructor(
    dir = join(cacheDir(), 'slices'),
    private readonly log?: (line: string) => void,
  ) {
    this.dir = dir;
    ensureCacheDir(dir);
    for (const stale of removeStaleTemporaries(dir)) log?.(`removed ${stale}, left by a killed write`);
  }

  static key(tensorSha256: string, start: number, count: number): string {
    return `${tensorSha256}-${start}-${count}`;
  }

  private path(key: string): string {
    return join(this.dir, `${key}.slice`);
  }

  /** The slice's bytes into `into` (from its start), or false when absent or corrupted (then removed). */
  read(key: string, into: Uint8Array, what: string): boolean {
    let file: Buffer;
    try {
      file = readFileSync(this.path(key));
    } catch {
      return false;
    }
    if (this.verify(file, into)) return true;
    this.log?.(`the cached slice of ${what} (${this.path(key)}) is corrupted: removed, fetching it again`);
    rmSync(this.path(key), { force: true });
    return false;
  }

  private verify(file: Buffer, into: Uint8Array): boolean {
    if (file.length < 8 || file.readUInt32BE(0) !== SLICE_MAGIC) return false;
    const chunks = file.readUInt32BE(4);
    let at = 8 + chunks * 36;
    if (file.length < at) return false;
    let out = 0;
    for (let c = 0; c < chunks; c++) {
      const length = file.readUInt32BE(8 + c * 36);
      const hash = file.subarray(12 + c * 36, 44 + c * 36).toString('hex');
      const data = file.subarray(at, at + length);
      if (data.length !== length || out + length > into.length || sha256(data) !== hash) return false;
      into.set(data, out);
      out += length;
      at += length;
    }
    return at === file.length && out === into.length;
  }

  /**
   * Starts the entry of a slice expected in `pieces` pieces: each checked piece is handed to
   * the writer as it arrives, and `finish` puts the entry in place (SliceWriter).
   */
  writer(key: string, pieces: number): SliceWriter {
    return new SliceWriter(this.path(key), pieces);
  }
}
