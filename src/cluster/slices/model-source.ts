import { hostname } from 'node:os';
import { join } from 'node:path';
import { TandemError } from '../../errors/index.js';
import { GgufModelFile } from '../../engine/model/gguf-model-file.js';
import type { ModelFile } from '../../engine/model/model-file.js';
import { modelManifest, sha256, stampOf, type FileStamp } from './manifest.js';
import { RemoteModelFile } from './remote-model-file.js';
import { SliceCache } from './slice-cache.js';
import { SliceClient } from './slice-client.js';
import type { SliceSource } from './slice-server.js';

/** Where a member's shard came from, as its load answer reports it. */
export type ShardOrigin =
  | { kind: 'local' }
  | { kind: 'slices'; why: string; fetchedBytes: number; cachedBytes: number; refetches: number; ms: number };

export interface ShardFile {
  file: ModelFile & { close(): void };
  /** Figures of the load so far (read after the shard has loaded). */
  origin(): ShardOrigin;
}

export interface ShardSourceOptions {
  secret: string;
  rank: number;
  /** Look for the model under this directory (the coordinator's path appended to it). */
  modelRoot?: string;
  log?: (line: string) => void;
}

function sameStamp(a: FileStamp, b: FileStamp): boolean {
  return (
    a.host === b.host && a.dev === b.dev && a.ino === b.ino && a.size === b.size && a.mtimeMs === b.mtimeMs
  );
}

/**
 * The model file a member loads its shard from: its own copy at the coordinator's path when
 * that holds the same model (the same file on the same host by stat, else the same size,
 * header hash and content hash, the latter hashed once and cached by stat), otherwise the
 * coordinator's model received slice by slice (RemoteModelFile). Without `source` (a
 * coordinator that serves no slices) the path is opened as it is.
 */
export async function openShardFile(
  model: string,
  source: SliceSource | undefined,
  o: ShardSourceOptions,
): Promise<ShardFile> {
  const path = o.modelRoot ? join(o.modelRoot, model) : model;
  const local = (file: GgufModelFile): ShardFile => ({ file, origin: () => ({ kind: 'local' }) });
  if (!source) return local(GgufModelFile.open(path));
  let why: string;
  let own: GgufModelFile | undefined;
  try {
    own = GgufModelFile.open(path);
  } catch (e) {
    why = `${path} cannot be opened here (${(e as Error).message})`;
  }
  let client: SliceClient | undefined;
  try {
    if (own) {
      if (sameStamp(stampOf(path, hostname()), source.stamp)) return local(own);
      why = `${path} here is another model (size or header differs)`;
      if (own.fileSize === source.size && sha256(own.gguf.readHeaderBytes()) === source.headerSha256) {
        client = await SliceClient.connect(source.address, o.secret, o.rank);
        const [theirs, mine] = await Promise.all([client.manifest(), modelManifest(path, own)]);
        if (theirs.id === mine.id) {
          client.close();
          return local(own);
        }
        why = `${path} here has other weights (content hash differs)`;
      }
      own.close();
      own = undefined;
    }
    o.log?.(`${why!}: receiving this shard's slices from the coordinator at ${source.address}`);
    return await remote(
      model,
      source,
      (client ??= await SliceClient.connect(source.address, o.secret, o.rank)),
      why!,
      o,
    );
  } catch (e) {
    own?.close();
    client?.close();
    throw e;
  }
}

async function remote(
  model: string,
  source: SliceSource,
  client: SliceClient,
  why: string,
  o: ShardSourceOptions,
): Promise<ShardFile> {
  const started = Date.now();
  const [header, manifest] = [await client.header(), await client.manifest()];
  if (sha256(header) !== source.headerSha256 || manifest.headerSha256 !== source.headerSha256)
    throw new TandemError(
      'CLUSTER_SLICE_CORRUPT',
      `the header of ${model} from ${source.address} does not match its SHA-256`,
      {
        hint: 'the model changed on the coordinator during the load, or the bytes were damaged; load again',
        details: { what: 'header', address: source.address },
      },
    );
  const file = new RemoteModelFile(
    header,
    source.size,
    `${model} (from ${source.address})`,
    client,
    manifest,
    openCache(o.log),
    o.log,
  );
  return {
    file,
    origin: () => ({
      kind: 'slices',
      why,
      fetchedBytes: file.fetchedBytes,
      cachedBytes: file.cachedBytes,
      refetches: file.refetches,
      ms: Date.now() - started,
    }),
  };
}

/** The slice cache, or none when its directory cannot be used (every slice is then fetched). */
function openCache(log?: (line: string) => void): SliceCache | undefined {
  try {
    return new SliceCache(undefined, log);
  } catch (e) {
    log?.(`no slice cache: ${(e as Error).message}`);
    return undefined;
  }
}
