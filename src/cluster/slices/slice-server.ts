import { statSync } from 'node:fs';
import { hostname } from 'node:os';
import { createServer, type Server, type Socket } from 'node:net';
import { TandemError } from '../../errors/index.js';
import { GgufModelFile } from '../../engine/model/gguf-model-file.js';
import { errorToJson, nonce, sameMac } from '../protocol.js';
import { mappedTensors } from './mapped-tensors.js';
import {
  CHUNK_BYTES,
  chunkRows,
  modelManifest,
  sha256,
  stampOf,
  tensorLayout,
  type FileStamp,
  type ModelManifest,
} from './manifest.js';
import {
  FrameKind,
  parseJson,
  QUEUED_BYTES,
  readFrames,
  sendFrame,
  writeFrame,
  writeJson,
  type Frame,
  type SliceRequest,
} from './wire.js';

/** What a load request tells a member about the coordinator's model and where to get its slices. */
export interface SliceSource {
  /** The slice server, as the member reaches it (the coordinator's end of its control connection). */
  address: string;
  /** The model file as it sits on the coordinator (the same stat on the same host: the same file). */
  stamp: FileStamp;
  /** Its size as GGUF and the SHA-256 of its header: a member's file of another size or header is another model. */
  size: number;
  headerSha256: string;
}

export interface SliceServerOptions {
  /** The model's absolute path on the coordinator. */
  model: string;
  /** HMAC of the cluster secret under a role, for a nonce (ControlClient.macFor). */
  mac: (role: string, nonce: string) => string;
  /** Progress lines for long transfers (every PROGRESS_MS while bytes flow). */
  onProgress?: (line: string) => void;
}

const PROGRESS_MS = 2000;
const HANDSHAKE_MS = 10_000;

/**
 * The coordinator's end of slice transfers for one load: it listens on every interface (the
 * members reach it at the address they reach the coordinator by), admits members that prove
 * the cluster secret, and answers their requests for the header, the manifest (hashed once,
 * lazily, cached by stat) and row ranges of tensors, read CHUNK_BYTES at a time and sent each
 * with its SHA-256, so neither side ever holds more than a chunk in flight beyond what the
 * member keeps.
 */
export class SliceServer {
  private manifestPromise: Promise<ModelManifest> | undefined;
  /** The manifest once hashed: whole pieces are then sent with its hashes, not hashed again. */
  private known: ModelManifest | undefined;
  private readonly sockets = new Set<Socket>();
  /** Bytes of tensor data sent, per member rank. */
  readonly sent = new Map<number, number>();
  private readonly progress: NodeJS.Timeout | undefined;

  private constructor(
    private readonly server: Server,
    private readonly file: GgufModelFile,
    /** The tensors mapped for sending (mapped-tensors.ts), else undefined: pieces are then read into buffers. */
    private readonly views: ReadonlyMap<string, Uint8Array> | undefined,
    readonly source: Omit<SliceSource, 'address'>,
    private readonly o: SliceServerOptions,
  ) {
    server.on('connection', (socket) => this.admit(socket));
    if (o.onProgress) this.progress = this.watchProgress(o.onProgress);
  }

  static async start(o: SliceServerOptions): Promise<SliceServer> {
    const file = GgufModelFile.open(o.model);
    try {
      const source = {
        stamp: stampOf(o.model, hostname()),
        size: file.fileSize,
        headerSha256: sha256(file.gguf.readHeaderBytes()),
      };
      const server = createServer();
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(0, () => resolve());
      });
      return new SliceServer(server, file, mapOrNot(o.model, file), source, o);
    } catch (e) {
      file.close();
      throw e;
    }
  }

  /** The address a member reaches this server by, given the coordinator's local address on its control connection. */
  addressFor(localAddress: string | undefined): SliceSource {
    const port = (this.server.address() as { port: number }).port;
    const host = (localAddress ?? '127.0.0.1').replace(/^::ffff:/, '');
    return { ...this.source, address: host.includes(':') ? `[${host}]:${port}` : `${host}:${port}` };
  }

  /** Bytes sent to every member so far. */
  get sentBytes(): number {
    let n = 0;
    for (const b of this.sent.values()) n += b;
    return n;
  }

  close(): void {
    clearInterval(this.progress);
    for (const s of this.sockets) s.destroy();
    this.server.close();
    this.file.close();
  }

  private manifest(): Promise<ModelManifest> {
    this.manifestPromise ??= modelManifest(this.o.model, this.file).then((m) => (this.known = m));
    return this.manifestPromise;
  }

  private watchProgress(say: (line: string) => void): NodeJS.Timeout {
    let last = new Map<number, number>();
    const timer = setInterval(() => {
      for (const [rank, bytes] of this.sent) {
        const before = last.get(rank) ?? 0;
        if (bytes > before)
          say(
            `slices: ${(bytes / 1e6).toFixed(1)} MB sent to rank ${rank} (${((bytes - before) / 1e6 / (PROGRESS_MS / 1000)).toFixed(1)} MB/s)`,
          );
      }
      last = new Map(this.sent);
    }, PROGRESS_MS);
    timer.unref();
    return timer;
  }

  private admit(socket: Socket): void {
    this.sockets.add(socket);
    socket.setNoDelay(true);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    const challenge = nonce();
    const timer = setTimeout(() => socket.destroy(), HANDSHAKE_MS);
    let rank = -1;
    let queue = Promise.resolve();
    const sending = new Outgoing();
    void writeJson(socket, FrameKind.hello, { nonce: challenge });
    readFrames(
      socket,
      (f) => {
        if (rank < 0) {
          const m = f.kind === FrameKind.auth ? safeJson(f) : undefined;
          if (
            !m ||
            !sameMac(m.mac, this.o.mac('slices-member', challenge)) ||
            typeof m.nonce !== 'string' ||
            !Number.isInteger(m.rank) ||
            (m.rank as number) < 0
          ) {
            socket.destroy();
            return;
          }
          clearTimeout(timer);
          rank = m.rank as number;
          void writeJson(socket, FrameKind.welcome, { mac: this.o.mac('slices-coordinator', m.nonce) });
          return;
        }
        const request = f.kind === FrameKind.request ? safeJson(f) : undefined;
        if (!request) {
          socket.destroy();
          return;
        }
        queue = queue.then(() =>
          this.answer(socket, rank, request as SliceRequest, sending).catch((e: unknown) =>
            writeJson(socket, FrameKind.error, errorToJson(e)),
          ),
        );
      },
      () => socket.destroy(),
    );
  }

  /**
   * Answers one request. Pieces are read into the connection's reused buffers (`out`) and
   * queued on the socket without waiting for the ones before them to leave: requests a member
   * sent ahead are answered back to back, so the socket never runs empty between answers.
   */
  private async answer(socket: Socket, rank: number, r: SliceRequest, out: Outgoing): Promise<void> {
    if (r.what === 'header') {
      const header = this.file.gguf.readHeaderBytes();
      await writeFrame(socket, FrameKind.chunk, [Buffer.from(sha256(header), 'hex'), header]);
      await writeJson(socket, FrameKind.end, { size: this.file.fileSize });
      return;
    }
    if (r.what === 'manifest') {
      await writeJson(socket, FrameKind.json, await this.manifest());
      return;
    }
    if (r.what !== 'rows') throw badRequest(`an unknown request '${String((r as { what: unknown }).what)}'`);
    const { stride, rows } = tensorLayout(this.checkedTensor(r.tensor), r.tensor);
    const { start, count } = r;
    if (!(
      Number.isInteger(start) &&
      Number.isInteger(count) &&
      start >= 0 &&
      count >= 1 &&
      start + count <= rows
    ))
      throw badRequest(`rows [${start}, ${start + count}) of ${r.tensor} are outside 0..${rows}`);
    const step = chunkRows(stride);
    const known = this.known?.chunks[r.tensor];
    const size = Math.max(CHUNK_BYTES, stride);
    const view = this.views?.get(r.tensor);
    // pieces follow the manifest's grid, so a whole one goes out with the hash it has there,
    // straight from the mapped file when it is mapped (nothing in this process reads those bytes)
    for (let at = start, n = 0; at < start + count; at += n) {
      await out.room(size);
      if (socket.destroyed) return;
      n = Math.min(step - (at % step), start + count - at);
      const whole = at % step === 0 && n === Math.min(step, rows - at);
      const hash = whole ? known?.[at / step] : undefined;
      if (view && hash !== undefined) {
        out.send(socket, [Buffer.from(hash, 'hex'), view.subarray(at * stride, (at + n) * stride)]);
      } else {
        const buffer = out.buffer(size);
        const data = this.file.readRows(r.tensor, at, n, buffer);
        out.send(socket, [Buffer.from(hash ?? sha256(data), 'hex'), data], buffer);
      }
      this.sent.set(rank, (this.sent.get(rank) ?? 0) + n * stride);
    }
    await writeJson(socket, FrameKind.end, {});
  }

  private checkedTensor(name: unknown): GgufModelFile {
    if (typeof name !== 'string' || !this.file.tensors.has(name))
      throw badRequest(`the model has no tensor '${String(name)}'`);
    return this.file;
  }
}

/**
 * A connection's pieces on their way out: read buffers given back once the socket has handed
 * their bytes to the kernel and reused for the next pieces (fresh ones would cost a page
 * fault per page and the collector's time on every piece), and at most QUEUED_BYTES of them
 * queued, so the next piece is read while the last ones go out, across answers.
 */
class Outgoing {
  private readonly free: Uint8Array[] = [];
  private readonly queued: Promise<void>[] = [];

  /** Resolves once fewer than QUEUED_BYTES worth of pieces of `size` bytes are queued. */
  async room(size: number): Promise<void> {
    while (this.queued.length >= Math.max(2, Math.floor(QUEUED_BYTES / size))) await this.queued.shift();
  }

  /** A read buffer of at least `size` bytes: one that has left, else a new one. */
  buffer(size: number): Uint8Array {
    const spare = this.free.pop();
    return spare !== undefined && spare.length >= size ? spare : new Uint8Array(size);
  }

  /** Queues one chunk frame of `parts`; `buffer` (a read buffer they view) is reused once it has left. */
  send(socket: Socket, parts: readonly Uint8Array[], buffer?: Uint8Array): void {
    this.queued.push(
      sendFrame(socket, FrameKind.chunk, parts).then(() => {
        if (buffer) this.free.push(buffer);
      }),
    );
  }
}

/** The model's tensors mapped for sending, or undefined (a folder, no koffi, a file that changed since it was opened). */
function mapOrNot(path: string, file: GgufModelFile): ReadonlyMap<string, Uint8Array> | undefined {
  try {
    return statSync(path).size === file.fileSize ? mappedTensors(path, file) : undefined;
  } catch {
    return undefined;
  }
}

function safeJson(f: Frame): Record<string, unknown> | undefined {
  try {
    return parseJson(f);
  } catch {
    return undefined;
  }
}

function badRequest(why: string): TandemError {
  return new TandemError('CLUSTER_PROTOCOL', `a slice request: ${why}`, {
    hint: 'run the same tandem version on the coordinator and every node',
  });
}
