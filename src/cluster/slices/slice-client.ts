import { connect, type Socket } from 'node:net';
import { isTandemError, TandemError } from '../../errors/index.js';
import { errorFromJson, mac, nonce, parseHostPort, sameMac } from '../protocol.js';
import { sha256, type ModelManifest } from './manifest.js';
import type { SliceChunks } from './slice-cache.js';
import {
  frameAssembler,
  FrameKind,
  parseJson,
  sliceProtocolError,
  writeJson,
  type Frame,
  type SliceRequest,
} from './wire.js';

const READ_BUFFER = 1024 * 1024;

/** Bytes received into `into`, and the pieces they came in (each checked against its hash). */
export interface ReceivedSlice extends SliceChunks {
  bytes: number;
}

/**
 * The member's end of a slice connection (see wire.ts): one request at a time, every piece of
 * tensor data checked against the SHA-256 the coordinator sent with it. A piece that does not
 * match is CLUSTER_SLICE_CORRUPT naming the tensor (the rest of the answer is read and dropped,
 * so the connection stays usable and the caller may ask again). Every wait is bounded by
 * `idleMs` without a frame.
 */
export class SliceClient {
  /** Frames read but not yet asked for (readFrames delivers every frame a read holds at once). */
  private readonly queued: Frame[] = [];
  private onFrame: ((f: Frame) => void) | undefined;
  private failure: TandemError | undefined;
  /** Bytes of tensor data received over this connection. */
  received = 0;
  /** Takes the bytes of each read (from one reused buffer: `onread`). */
  private readonly feed: (data: Uint8Array) => void;

  private constructor(
    private readonly socket: Socket,
    readonly address: string,
    private readonly idleMs: number,
  ) {
    this.feed = frameAssembler(
      (f) => (this.onFrame ? this.onFrame(f) : this.queued.push(f)),
      (why) => this.fail(sliceProtocolError(why, address)),
    );
    socket.on('close', () =>
      this.fail(
        new TandemError(
          'CLUSTER_NODE_LOST',
          `the coordinator's slice server at ${address} closed the connection`,
          {
            hint: 'the coordinator stopped or the network failed; the load is retried at the next placement',
            details: { address },
          },
        ),
      ),
    );
    socket.on('error', () => socket.destroy());
  }

  /** Dials the coordinator's slice server and proves the cluster secret (both ways) within `timeoutMs`. */
  static async connect(
    address: string,
    secret: string,
    rank: number,
    timeoutMs = 10_000,
  ): Promise<SliceClient> {
    const { host, port } = parseHostPort(address, 'slice server address');
    // reads land in one reused buffer and are copied once, into their frame
    const socket = connect({
      host,
      port,
      onread: {
        buffer: Buffer.allocUnsafe(READ_BUFFER),
        callback: (n, buf) => {
          client.feed(buf.subarray(0, n));
          return true;
        },
      },
    });
    socket.setNoDelay(true);
    const client = new SliceClient(socket, address, timeoutMs);
    try {
      const hello = await client.next(timeoutMs, 'the handshake');
      const m = hello.kind === FrameKind.hello ? parseJson(hello) : {};
      if (typeof m.nonce !== 'string') throw sliceProtocolError('no challenge', address);
      const mine = nonce();
      await writeJson(socket, FrameKind.auth, {
        mac: mac(secret, 'slices-member', m.nonce),
        nonce: mine,
        rank,
      });
      const welcome = await client.next(timeoutMs, 'the handshake');
      const w = welcome.kind === FrameKind.welcome ? parseJson(welcome) : {};
      if (!sameMac(w.mac, mac(secret, 'slices-coordinator', mine)))
        throw new TandemError('CLUSTER_AUTH', `the slice server at ${address} failed the handshake`, {
          hint: 'use the same --secret-file (or TANDEM_SECRET) on every node and the coordinator',
        });
      return client;
    } catch (e) {
      socket.destroy();
      if (!isTandemError(e, 'CLUSTER_NODE_LOST')) throw e;
      throw new TandemError(
        'CLUSTER_AUTH',
        `the slice server at ${address} closed the connection during the handshake`,
        {
          hint: 'use the same --secret-file (or TANDEM_SECRET) on every node and the coordinator',
          details: { address },
        },
      );
    }
  }

  close(): void {
    this.socket.destroy();
  }

  async header(): Promise<Uint8Array> {
    let header = new Uint8Array(0);
    await this.ask({ what: 'header' }, 'the header', (data) => {
      header = new Uint8Array(data);
      return 0;
    });
    return header;
  }

  async manifest(): Promise<ModelManifest> {
    await this.send({ what: 'manifest' });
    // the coordinator may hash the whole model first
    const f = await this.next(Math.max(this.idleMs, 600_000), 'the manifest');
    this.throwIfError(f);
    return parseJson(f) as unknown as ModelManifest;
  }

  /** Rows [start, start + count) of `tensor` into `into` (from its start). */
  async rows(tensor: string, start: number, count: number, into: Uint8Array): Promise<ReceivedSlice> {
    const lengths: number[] = [];
    const hashes: string[] = [];
    let at = 0;
    await this.ask({ what: 'rows', tensor, start, count }, `tensor ${tensor}`, (data, hash) => {
      if (at + data.length > into.length)
        throw sliceProtocolError(
          `more bytes than rows [${start}, ${start + count}) of ${tensor} hold`,
          this.address,
        );
      into.set(data, at);
      at += data.length;
      lengths.push(data.length);
      hashes.push(hash);
      return data.length;
    });
    if (at !== into.length)
      throw sliceProtocolError(
        `${at} bytes for rows [${start}, ${start + count}) of ${tensor} (${into.length} expected)`,
        this.address,
      );
    this.received += at;
    return { bytes: at, lengths, hashes };
  }

  /**
   * Sends `r` and feeds each checked piece to `take` until the answer ends. A piece whose hash
   * does not match is not passed on; the answer is drained, then CLUSTER_SLICE_CORRUPT thrown.
   */
  private async ask(
    r: SliceRequest,
    what: string,
    take: (data: Buffer, hash: string) => number,
  ): Promise<void> {
    await this.send(r);
    await this.readAnswer(what, take);
  }

  private async readAnswer(what: string, take: (data: Buffer, hash: string) => number): Promise<void> {
    let corrupt: TandemError | undefined;
    let piece = 0;
    for (;;) {
      const f = await this.next(this.idleMs, what);
      this.throwIfError(f);
      if (f.kind === FrameKind.end) break;
      if (f.kind !== FrameKind.chunk || f.payload.length < 32)
        throw this.broken(
          sliceProtocolError(`an unexpected frame (kind ${f.kind}) in ${what}`, this.address),
        );
      const hash = f.payload.subarray(0, 32).toString('hex');
      const data = f.payload.subarray(32);
      if (!corrupt && sha256(data) !== hash)
        corrupt = new TandemError(
          'CLUSTER_SLICE_CORRUPT',
          `piece ${piece} of ${what} from ${this.address} does not match its SHA-256 (${data.length} bytes)`,
          {
            hint: 'the bytes were damaged on the way; they are fetched again. If it repeats, check the network and the memory of both machines',
            details: { what, piece, address: this.address },
          },
        );
      if (!corrupt)
        try {
          take(data, hash);
        } catch (e) {
          throw this.broken(e as TandemError);
        }
      piece++;
    }
    if (corrupt) throw corrupt;
  }

  private send(r: SliceRequest): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    return writeJson(this.socket, FrameKind.request, r);
  }

  private throwIfError(f: Frame): void {
    if (f.kind === FrameKind.error) throw errorFromJson(parseJson(f), 'the coordinator', this.address);
  }

  /** `e`, after ending the connection: the answers after it can no longer be told apart. */
  private broken(e: TandemError): TandemError {
    this.fail(e);
    return e;
  }

  private fail(e: TandemError): void {
    this.failure ??= e;
    this.socket.destroy();
    this.onFrame?.({ kind: -1, payload: Buffer.alloc(0) });
  }

  /** The next frame, or the connection's failure, or CLUSTER_TIMEOUT after `ms` without one. */
  private next(ms: number, what: string): Promise<Frame> {
    const ready = this.queued.shift();
    if (ready) return Promise.resolve(ready);
    return new Promise((resolve, reject) => {
      if (this.failure) return reject(this.failure);
      const timer = setTimeout(() => {
        this.onFrame = undefined;
        const e = new TandemError(
          'CLUSTER_TIMEOUT',
          `the coordinator's slice server at ${this.address} sent nothing for ${ms} ms during ${what}`,
          {
            hint: 'the coordinator is overloaded or the network stalled; the load fails and is retried at the next placement',
            details: { address: this.address },
          },
        );
        this.fail(e);
        reject(e);
      }, ms);
      this.onFrame = (f) => {
        clearTimeout(timer);
        this.onFrame = undefined;
        if (f.kind === -1) reject(this.failure);
        else resolve(f);
      };
    });
  }
}
