import { connect, type Socket } from 'node:net';
import { isTandemError, TandemError } from '../../errors/index.js';
import { errorFromJson, mac, nonce, parseHostPort, sameMac } from '../protocol.js';
import type { ModelManifest } from './manifest.js';
import { pieceDigest } from './piece-hash.js';
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
 * One request's answer as its frames arrive: answers come in the order their requests were
 * sent, so the frames at the head of the stream belong to the oldest answer not yet complete.
 */
interface Answer {
  what: string;
  /** Where its chunks' data land (a rows answer): `into` from `at` on; else fresh buffers. */
  target?: { into: Uint8Array; at: number };
  /** Takes one frame; true once the answer is complete. A throw fails the answer. */
  frame(f: Frame): boolean;
  settle(e?: unknown): void;
  /** Longest wait for its next frame, in ms. */
  idleMs: number;
}

/**
 * The member's end of a slice connection (see wire.ts): requests may be sent while earlier
 * ones are answered (the coordinator answers them in order, back to back, so a window of
 * requests in flight keeps the link busy across answers with no round trip between them);
 * every piece of tensor data is checked against the SHA-256 the coordinator sent with it. A
 * piece that does not match is CLUSTER_SLICE_CORRUPT naming the tensor (the rest of its answer
 * is read and dropped, so the connection stays usable and the caller may ask again). Every
 * wait is bounded by `idleMs` without a frame.
 */
export class SliceClient {
  /** Answers awaited, oldest first. */
  private readonly answers: Answer[] = [];
  private failure: TandemError | undefined;
  private idle: NodeJS.Timeout | undefined;
  /** Bytes of tensor data received over this connection. */
  received = 0;
  /** Takes the bytes of each read: read into a piece's destination (`want`), else into one reused buffer. */
  private readonly assembler: FrameAssembler;

  private constructor(
    private readonly socket: Socket,
    readonly address: string,
    private readonly idleMs: number,
  ) {
    this.assembler = new FrameAssembler(
      (f) => this.dispatch(f),
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
      // the coordinator speaks first: its challenge is the first answer awaited
      const hello = await client.single('the handshake', timeoutMs);
      const m = hello.kind === FrameKind.hello ? parseJson(hello) : {};
      if (typeof m.nonce !== 'string') throw sliceProtocolError('no challenge', address);
      const mine = nonce();
      const welcomed = client.single('the handshake', timeoutMs);
      await writeJson(socket, FrameKind.auth, {
        mac: mac(secret, 'slices-member', m.nonce),
        nonce: mine,
        rank,
      });
      const welcome = await welcomed;
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
    await this.ask({ what: 'header' }, 'the header', undefined, (data) => {
      header = new Uint8Array(data);
      return { view: header };
    });
    return header;
  }

  async manifest(): Promise<ModelManifest> {
    // the coordinator may hash the whole model first
    const answer = this.single('the manifest', Math.max(this.idleMs, 600_000));
    await this.send({ what: 'manifest' });
    const f = await answer;
    this.throwIfError(f);
    return parseJson(f) as unknown as ModelManifest;
  }

  /**
   * Rows [start, start + count) of `tensor` into `into` (from its start). `checked` is told of
   * each piece that matched its hash, as it arrives (its offset in `into` and its bytes).
   * Calls may overlap: each sends its request at once, and the answers arrive in that order.
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
    await this.ask(
      { what: 'rows', tensor, start, count },
      `tensor ${tensor}`,
      { into, at: 0 },
      (data, hash) => {
        if (at + data.length > into.length)
          throw sliceProtocolError(
            `more bytes than rows [${start}, ${start + count}) of ${tensor} hold`,
            this.address,
          );
        // a placed piece is already there (place() put it at `at`)
        if (data.buffer !== into.buffer || data.byteOffset !== into.byteOffset + at) into.set(data, at);
        const offset = at;
        const view = into.subarray(at, at + data.length);
        at += data.length;
        lengths.push(data.length);
        hashes.push(hash);
        return { view, matched: () => checked?.(offset, view) };
      },
    );
    if (at !== into.length)
      throw sliceProtocolError(
        `${at} bytes for rows [${start}, ${start + count}) of ${tensor} (${into.length} expected)`,
        this.address,
      );
    this.received += at;
    return { bytes: at, lengths, hashes };
  }

  /** A chunk's data goes straight to its answer's destination, in order, while it has room (else a fresh buffer: the answer then fails its length check). */
  private place(kind: number, length: number): { head: Buffer; body: Uint8Array } | undefined {
    const t = this.answers[0]?.target;
    if (!t || kind !== FrameKind.chunk || length < 32 || t.at + length - 32 > t.into.length) return undefined;
    const body = t.into.subarray(t.at, t.at + length - 32);
    t.at += length - 32;
    return { head: Buffer.allocUnsafe(32), body };
  }

  /**
   * Sends `r` and hands each piece of its answer to `take` as it arrives, which puts it in its
   * place; its SHA-256 is then checked there on the thread pool (pieceDigest) while the next
   * pieces are received, and `matched` is called once it matches. The answer settles only once
   * every piece's check has (nothing reads its bytes after that) and counts only if every piece
   * matched: otherwise the whole answer is drained, then CLUSTER_SLICE_CORRUPT thrown, and the
   * bytes `take` got must not be used.
   */
  private ask(
    r: SliceRequest,
    what: string,
    target: Answer['target'],
    take: (data: Uint8Array, hash: string) => { view: Uint8Array; matched?: () => void },
  ): Promise<void> {
    let corrupt: Error | undefined;
    let piece = 0;
    const checks: Promise<void>[] = [];
    const digest = pieceDigest();
    const done = new Promise<void>((resolve, reject) => {
      this.expect({
        what,
        ...(target ? { target } : {}),
        idleMs: this.idleMs,
        settle: (e) =>
          void Promise.all(checks).then(() => {
            const why = e ?? corrupt;
            if (why === undefined) resolve();
            else reject(why as Error);
          }),
        frame: (f) => {
          this.throwIfError(f);
          if (f.kind === FrameKind.end) return true;
          if (f.kind !== FrameKind.chunk || f.payload.length < 32)
            throw this.broken(
              sliceProtocolError(`an unexpected frame (kind ${f.kind}) in ${what}`, this.address),
            );
          const hash = f.payload.subarray(0, 32).toString('hex');
          let placed: ReturnType<typeof take>;
          try {
            placed = take(f.body ?? f.payload.subarray(32), hash);
          } catch (e) {
            throw this.broken(e as TandemError);
          }
          const n = piece++;
          checks.push(
            digest(placed.view).then(
              (h) => {
                if (h === hash) placed.matched?.();
                else corrupt ??= this.corruptPiece(what, n, placed.view.length);
              },
              (e: unknown) => {
                corrupt ??= e as Error;
              },
            ),
          );
          return false;
        },
      });
    });
    // a request that cannot be sent fails its answer too (the connection's failure): both are awaited
    return Promise.all([this.send(r), done]).then(() => undefined);
  }

  /** The next frame as one answer (the handshake's, the manifest). */
  private single(what: string, idleMs: number): Promise<Frame> {
    return new Promise((resolve, reject) => {
      let got: Frame | undefined;
      this.expect({
        what,
        idleMs,
        settle: (e) => (e === undefined ? resolve(got!) : reject(e as Error)),
        frame: (f) => {
          got = f;
          return true;
        },
      });
    });
  }

  private expect(a: Answer): void {
    if (this.failure) return a.settle(this.failure);
    this.answers.push(a);
    if (this.answers.length === 1) this.watch();
  }

  /** Hands a frame to the oldest answer awaited; a frame nobody awaits breaks the protocol. */
  private dispatch(f: Frame): void {
    const a = this.answers[0];
    if (!a) return this.fail(sliceProtocolError(`an unexpected frame (kind ${f.kind})`, this.address));
    let complete: boolean;
    try {
      complete = a.frame(f);
    } catch (e) {
      complete = true;
      if (this.answers[0] === a) this.answers.shift();
      a.settle(e);
    }
    if (complete && this.answers[0] === a) {
      this.answers.shift();
      a.settle();
    }
    this.watch();
  }

  /** (Re)arms the idle timer for the oldest answer awaited, or clears it when none is. */
  private watch(): void {
    clearTimeout(this.idle);
    const a = this.answers[0];
    if (!a || this.failure) return;
    this.idle = setTimeout(() => {
      this.fail(
        new TandemError(
          'CLUSTER_TIMEOUT',
          `the coordinator's slice server at ${this.address} sent nothing for ${a.idleMs} ms during ${a.what}`,
          {
            hint: 'the coordinator is overloaded or the network stalled; the load fails and is retried at the next placement',
            details: { address: this.address },
          },
        ),
      );
    }, a.idleMs);
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

  /** Ends the connection with `e`: every answer awaited fails with it, and every later request. */
  private fail(e: TandemError): void {
    if (this.failure) return;
    this.failure = e;
    clearTimeout(this.idle);
    this.socket.destroy();
    for (const a of this.answers.splice(0)) a.settle(e);
  }
}
