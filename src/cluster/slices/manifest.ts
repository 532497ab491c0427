import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { GgufModelFile } from '../../engine/model/gguf-model-file.js';
import { matrixShape, rowBytes } from '../../engine/model/model-file.js';
import { writeFileAtomically } from '../../engine/format/atomic-file.js';
import { cacheDir, ensureCacheDir } from '../demo.js';

/** Rows are hashed and sent in pieces of about this many bytes (at least one row). */
export const CHUNK_BYTES = 4 * 1024 * 1024;

/**
 * A model's content identity: the SHA-256 of its GGUF header (metadata and tensor table, the
 * bytes before the tensor data) and of each tensor's raw bytes (the hash of the hashes of its
 * pieces, see `chunks`). `id` hashes all of them, so
 * two files with the same id hold the same model whatever their paths; a member's cached
 * slices are keyed by the tensor hashes, so a moved or renamed file finds them again.
 */
export interface ModelManifest {
  size: number;
  headerSha256: string;
  tensors: Record<string, string>;
  /**
   * Per tensor, the SHA-256 of each piece of the grid chunkRows lays over its rows (piece k:
   * rows [k * step, (k + 1) * step)): the coordinator sends these with whole pieces instead of
   * hashing them again for every transfer.
   */
  chunks: Record<string, string[]>;
  id: string;
}

/** Where a file sits on its host: a file with the same stat on the same host is the same file. */
export interface FileStamp {
  host: string;
  dev: number;
  ino: number;
  size: number;
  mtimeMs: number;
}

export function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** Rows per chunk for rows of `stride` bytes: CHUNK_BYTES worth, at least one. */
export function chunkRows(stride: number): number {
  return Math.max(1, Math.floor(CHUNK_BYTES / stride));
}

/** Pieces the grid of `step` rows cuts rows [start, start + count) into (one per grid cell they touch). */
export function gridPieces(start: number, count: number, step: number): number {
  return Math.ceil((start + count) / step) - Math.floor(start / step);
}

/** Bytes of one row of a tensor of `file`, and its row count. */
export function tensorLayout(file: GgufModelFile, name: string): { stride: number; rows: number } {
  const entry = file.tensors.get(name);
  if (!entry) throw new Error(`no tensor ${name}`);
  const { rows, cols } = matrixShape(entry);
  return { stride: rowBytes(entry.type, cols), rows };
}

/** Hashes every tensor of an open model, reading CHUNK_BYTES at a time (never the whole model). */
export function hashModel(file: GgufModelFile): ModelManifest {
  const headerSha256 = sha256(file.gguf.readHeaderBytes());
  const tensors: Record<string, string> = {};
  const chunks: Record<string, string[]> = {};
  for (const name of file.tensors.keys()) {
    const { stride, rows } = tensorLayout(file, name);
    const step = chunkRows(stride);
    const buffer = new Uint8Array(step * stride);
    const pieces: string[] = (chunks[name] = []);
    for (let r = 0; r < rows; r += step)
      pieces.push(sha256(file.readRows(name, r, Math.min(step, rows - r), buffer)));
    // one pass over the bytes: the tensor's hash is the hash of its pieces' hashes
    tensors[name] = createHash('sha256').update(pieces.join('\n')).digest('hex');
  }
  const all = createHash('sha256').update(headerSha256);
  for (const [name, h] of Object.entries(tensors)) all.update(`\n${name}=${h}`);
  return { size: file.fileSize, headerSha256, tensors, chunks, id: all.digest('hex') };
}

/** Stat identity of `path` on this host. */
export function stampOf(path: string, host: string): FileStamp {
  const s = statSync(path);
  return { host, dev: s.dev, ino: s.ino, size: s.size, mtimeMs: s.mtimeMs };
}

/**
 * The manifest of the model at `path` (an open `file`), from the cache when the file's stat
 * has not changed since it was hashed (TANDEM_CACHE_DIR/manifests, keyed by path and stat), else
 * hashed now and cached (a model folder is hashed every time). Hashing reads the whole model once; later loads read none of it.
 */
export async function modelManifest(path: string, file: GgufModelFile): Promise<ModelManifest> {
  const s = statSync(path);
  // a folder's stat does not change when a file inside it is rewritten: hash it every time
  if (s.isDirectory()) return hashModel(file);
  const key = sha256(
    new TextEncoder().encode(`${path}|${s.dev}|${s.ino}|${s.size}|${s.mtimeMs}|${file.fileSize}`),
  );
  const dir = join(cacheDir(), 'manifests');
  const where = join(dir, `${key}.json`);
  try {
    const cached = JSON.parse(readFileSync(where, 'utf8')) as ModelManifest;
    if (typeof cached.id === 'string' && cached.size === file.fileSize && typeof cached.chunks === 'object')
      return cached;
  } catch {
    // absent or unreadable: hash again below
  }
  const manifest = hashModel(file);
  try {
    ensureCacheDir(dir);
    await writeFileAtomically(where, (f) => writeFile(f, JSON.stringify(manifest)));
  } catch {
    // a cache that cannot be written costs a hash next time, nothing else
  }
  return manifest;
}
