import { connect, type Socket } from 'node:net';
import { isTandemError, TandemError } from '../../errors/index.js';
import { errorFromJson, mac, nonce, parseHostPort, sameMac } from '../protocol.js';
import { sha256, type ModelManifest } from './manifest.js';
import type { SliceChunks } from './slice-writer.js';
import {
  FrameAssembler,
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
  /**
   * Where the pieces of the rows asked for land as they arrive: `into` from `at` on (a piece's
   * data read there straight from the socket); undefined between answers.
   */
  private target: { into: Uint8Array; at: number } | undefined;
  /** Takes the bytes of each read: read into a piece's destination (`want`), else into one reused buffer. */
  private readonly assembler: FrameAssembler;

  private constructor(
    private readonly socket: Socket,
    readonly address: string,
    private readonly idleMs: number,
  ) {
    this.assembler = new FrameAssembler(
      (f) => (this.onFrame ? this.onFrame(f) : this.queued.push(f)),
      (why) => this.fail(sliceProtocolError(why, address)),
      (kind, length) => this.place(kind, length),
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
    // a piece's data is read straight into its destination; headers, hashes and small frames
    // land in one reused buffer and are copied once, into their frame
    const spare = Buffer.allocUnsafe(READ_BUFFER);
    // the client is made after its socket; reads before that (none carry data) use the spare buffer
    const made: { client?: SliceClient } = {};
    const socket = connect({
      host,
      port,
      onread: {
        buffer: () => made.client?.assembler.want() ?? spare,
        callback: (n, buf) => {
          made.client?.assembler.feed(buf.subarray(0, n));
          return true;
        },
      },
    });
    socket.setNoDelay(true);
    const client = (made.client = new SliceClient(socket, address, timeoutMs));
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

  /**
   * Rows [start, start + count) of `tensor` into `into` (from its start). `checked` is told of
   * each piece that matched its hash, as it arrives (its offset in `into` and its bytes).
   */
  async rows(
    tensor: string,
    start: number,
    count: number,
    into: Uint8Array,
    checked?: (offset: number, data: Uint8Array) => void,
  ): Promise<ReceivedSlice> {
    const lengths: number[] = [];
    const hashes: string[] = [];
    let at = 0;
    this.target = { into, at: 0 };
    try {
      await this.ask({ what: 'rows', tensor, start, count }, `tensor ${tensor}`, (data, hash, ok) => {
        if (at + data.length > into.length)
          throw sliceProtocolError(
            `more bytes than rows [${start}, ${start + count}) of ${tensor} hold`,
            this.address,
          );
        // a placed piece is already there (place() put it at `at`)
        if (data.buffer !== into.buffer || data.byteOffset !== into.byteOffset + at) into.set(data, at);
        if (ok) checked?.(at, into.subarray(at, at + data.length));
        at += data.length;
        lengths.push(data.length);
        hashes.push(hash);
        return data.length;
      });
    } finally {
      this.target = undefined;
    }
    if (at !== into.length)
      throw sliceProtocolError(
        `${at} bytes for rows [${start}, ${start + count}) of ${tensor} (${into.length} expected)`,
        this.address,
      );
    this.received += at;
    return { bytes: at, lengths, hashes };
  }

  /** A chunk's data goes straight to the rows' destination, in order, while it has room (else a fresh buffer: the answer then fails its length check). */
  private place(kind: number, length: number): { head: Buffer; body: Uint8Array } | undefined {
    const t = this.target;
    if (!t || kind !== FrameKind.chunk || length < 32 || t.at + length - 32 > t.into.length) return undefined;
    const body = t.into.subarray(t.at, t.at + length - 32);
    t.at += length - 32;
    return { head: Buffer.allocUnsafe(32), body };
  }

  /**
   * Sends `r` and feeds each piece to `take` as it arrives, its SHA-256 checked as it completes
   * (the kernel goes on receiving the next piece into the socket's buffer meanwhile). The answer
   * counts only once every piece matched: otherwise the whole answer is drained, then
   * CLUSTER_SLICE_CORRUPT thrown, and the bytes `take` got must not be used.
   */
  private async ask(
    r: SliceRequest,
    what: string,
    take: (data: Uint8Array, hash: string, ok: boolean) => number,
  ): Promise<void> {
    await this.send(r);
    await this.readAnswer(what, take);
  }

  private async readAnswer(
    what: string,
    take: (data: Uint8Array, hash: string, ok: boolean) => number,
  ): Promise<void> {
    let corrupt: TandemError | undefined;
    for (let piece = 0; ; piece++) {
      const f = await this.next(this.idleMs, what);
      this.throwIfError(f);
      if (f.kind === FrameKind.end) break;
      if (f.kind !== FrameKind.chunk || f.payload.length < 32)
        throw this.broken(
          sliceProtocolError(`an unexpected frame (kind ${f.kind}) in ${what}`, this.address),
        );
      const hash = f.payload.subarray(0, 32).toString('hex');
      const data = f.body ?? f.payload.subarray(32);
      const ok = sha256(data) === hash;
      if (!ok) corrupt ??= this.corruptPiece(what, piece, data.length);
      try {
        take(data, hash, ok);
      } catch (e) {
        throw this.broken(e as TandemError);
      }
    }
    if (corrupt) throw corrupt;
  }

  private corruptPiece(what: string, piece: number, bytes: number): TandemError {
    return new TandemError(
      'CLUSTER_SLICE_CORRUPT',
      `piece ${piece} of ${what} from ${this.address} does not match its SHA-256 (${bytes} bytes)`,
      {
        hint: 'the bytes were damaged on the way; they are fetched again. If it repeats, check the network and the memory of both machines',
        details: { what, piece, address: this.address },
      },
    );
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
