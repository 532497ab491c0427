import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { removeStaleTemporaries, writeFileAtomically } from '../../engine/format/atomic-file.js';
import { cacheDir, ensureCacheDir } from '../demo.js';
import { sha256 } from './manifest.js';

/** A slice as it arrived: its pieces' lengths and SHA-256 (as the coordinator sent them), and its bytes. */
export interface SliceChunks {
  lengths: number[];
  hashes: string[];
}

const MAGIC = 0x54534c31; // 'TSL1'

/**
 * A member's slices received from coordinators, one file per slice under
 * TANDEM_CACHE_DIR/slices, named by the content hash of its tensor and its row range: the same
 * tensor of any model file (whatever its path) finds it again. A file holds
 * `[magic u32][chunks u32]([length u32][sha256 32 bytes])*` then the bytes; each piece is
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
    if (file.length < 8 || file.readUInt32BE(0) !== MAGIC) return false;
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

  /** Stores a slice whose pieces were checked against `chunks.hashes` as they arrived. */
  async write(key: string, data: Uint8Array, chunks: SliceChunks): Promise<void> {
    const head = Buffer.alloc(8 + chunks.lengths.length * 36);
    head.writeUInt32BE(MAGIC, 0);
    head.writeUInt32BE(chunks.lengths.length, 4);
    chunks.lengths.forEach((length, c) => {
      head.writeUInt32BE(length, 8 + c * 36);
      Buffer.from(chunks.hashes[c] as string, 'hex').copy(head, 12 + c * 36);
    });
    await writeFileAtomically(this.path(key), async (f) => {
      await f.write(head);
      await f.writeFile(data);
    });
  }
}
