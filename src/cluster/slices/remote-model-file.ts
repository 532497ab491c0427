import { isTandemError } from '../../errors/index.js';
import type { ByteSource } from '../../engine/format/byte-source.js';
import { GgufFile } from '../../engine/format/gguf-reader.js';
import { GgufModelFile } from '../../engine/model/gguf-model-file.js';
import {
  matrixShape,
  missingTensor,
  rowBytes,
  type ModelFile,
  type TensorEntry,
} from '../../engine/model/model-file.js';
import { chunkRows, gridPieces, type ModelManifest } from './manifest.js';
import { SliceCache } from './slice-cache.js';
import type { SliceClient } from './slice-client.js';

/** Fetches of one slice before a piece that keeps failing its hash ends the load. */
export const SLICE_TRIES = 3;

/** Layers a member loads at once from the coordinator (ModelFile.readsInFlight). */
export const REMOTE_READS_IN_FLIGHT = 2;

/**
 * A GGUF header received from the coordinator, as a ByteSource of the whole file's size: the
 * parser reads only header bytes, and reads that run past them (its read-ahead window) see
 * zeros, which it never interprets.
 */
class HeaderSource implements ByteSource {
  constructor(
    private readonly header: Uint8Array,
    readonly size: number,
    readonly name: string,
  ) {}
  readInto(offset: number, length: number, into: Uint8Array): void {
    into.fill(0, 0, length);
    if (offset < this.header.length)
      into.set(this.header.subarray(offset, Math.min(offset + length, this.header.length)));
  }
  close(): void {}
}

/**
 * The coordinator's model as a member without the file sees it: metadata and the tensor table
 * from the header it received; each row range read comes from the slice cache when held there
 * (checked piece by piece), else from the coordinator over the slice connection (checked as it
 * arrives, re-asked up to SLICE_TRIES times when a piece is damaged) and is then cached.
 */
export class RemoteModelFile implements ModelFile {
  readonly tensors: ReadonlyMap<string, TensorEntry>;
  /** Bytes of tensor data received from the coordinator, and read from the cache. */
  fetchedBytes = 0;
  cachedBytes = 0;
  /** Pieces that failed their hash and were asked for again. */
  refetches = 0;
  /** Reads a loader keeps in flight: the next layer's requests travel while one is uploaded. */
  readonly readsInFlight = REMOTE_READS_IN_FLIGHT;
  private readonly header: GgufModelFile;

  constructor(
    headerBytes: Uint8Array,
    size: number,
    name: string,
    private readonly client: SliceClient,
    private readonly manifest: ModelManifest,
    private readonly cache: SliceCache | undefined,
    private readonly log?: (line: string) => void,
  ) {
    this.header = new GgufModelFile(GgufFile.fromSource(new HeaderSource(headerBytes, size, name)));
    this.tensors = this.header.tensors;
  }

  meta(key: string): unknown {
    return this.header.meta(key);
  }

  get fileSize(): number {
    return this.header.fileSize;
  }

  async readRows(name: string, start: number, count: number, into?: Uint8Array): Promise<Uint8Array> {
    const entry = this.tensors.get(name);
    const hash = this.manifest.tensors[name];
    if (!entry || hash === undefined) throw missingTensor(name);
    const need = count * rowBytes(entry.type, matrixShape(entry).cols);
    const out = into && into.length >= need ? into.subarray(0, need) : new Uint8Array(need);
    const what = `tensor ${name} rows [${start}, ${start + count})`;
    const key = SliceCache.key(hash, start, count);
    if (this.cache?.read(key, out, what)) {
      this.cachedBytes += need;
      return out;
    }
    const pieces = gridPieces(start, count, chunkRows(rowBytes(entry.type, matrixShape(entry).cols)));
    for (let attempt = 1; ; attempt++) {
      // checked pieces go to the cache as they arrive, written while the next ones are received
      const writer = this.cache?.writer(key, pieces);
      try {
        const got = await this.client.rows(name, start, count, out, (at, data) => writer?.piece(at, data));
        this.fetchedBytes += need;
        await writer?.finish(got, out).catch((e: unknown) => {
          this.log?.(`cannot cache ${what}: ${(e as Error).message}`);
        });
        return out;
      } catch (e) {
        // nothing of a failed fetch stays in the cache, nor writes from `out` once it is reused
        await writer?.abort(e as Error);
        if (!isTandemError(e, 'CLUSTER_SLICE_CORRUPT') || attempt >= SLICE_TRIES) throw e;
        this.refetches++;
        this.log?.(`${e.message}: asking again (${attempt} of ${SLICE_TRIES - 1} retries)`);
      }
    }
  }

  close(): void {
    this.header.close();
    this.client.close();
  }
}
