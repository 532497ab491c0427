import type { Socket } from 'node:net';
import { TandemError } from '../../errors/index.js';

/**
 * The slice connection's frames, both ways: `[kind u8][length u32 BE][payload]`. The member
 * dials the coordinator's slice server, both prove the cluster secret (HMAC challenge-response,
 * as the control connection does, under their own roles), then the member asks and the
 * coordinator answers. A member may send requests before the earlier ones are answered; the
 * coordinator answers them in the order they came, each answer whole before the next:
 *
 *   hello    coordinator -> member  JSON {nonce}
 *   auth     member -> coordinator  JSON {mac, nonce, rank}
 *   welcome  coordinator -> member  JSON {mac}
 *   request  member -> coordinator  JSON {what: 'header' | 'manifest'} | {what: 'rows', tensor, start, count}
 *   json     coordinator -> member  JSON answer (header size, manifest)
 *   chunk    coordinator -> member  [sha256 32 bytes][data]: one piece of the answer's bytes
 *   end      coordinator -> member  JSON {}: the answer is complete
 *   error    coordinator -> member  JSON TandemError (errorToJson)
 */
export const FrameKind = {
  hello: 1,
  auth: 2,
  welcome: 3,
  request: 4,
  json: 5,
  chunk: 6,
  end: 7,
  error: 8,
} as const;
export type FrameKind = (typeof FrameKind)[keyof typeof FrameKind];

/** Largest payload accepted: a chunk (CHUNK_BYTES, or one row past it) or a GGUF header. */
export const MAX_FRAME = 256 * 1024 * 1024;

export interface Frame {
  kind: number;
  payload: Buffer;
  /**
   * Where a placed frame's payload went past its head (see FramePlace): `payload` is then only
   * the head, and these bytes already sit where the receiver wanted them.
   */
  body?: Uint8Array;
}

/**
 * Where the payload of a frame of `kind` and `length` bytes should be written instead of a
 * fresh buffer: its first `head.length` bytes into `head`, the rest into `body` (the two
 * lengths add up to `length`), or undefined for a fresh buffer. This lets a piece of tensor
 * data land straight in its destination: read there from the socket (FrameAssembler.want), or
 * copied there once out of a read buffer.
 */
export type FramePlace = (kind: number, length: number) => { head: Buffer; body: Uint8Array } | undefined;

export type SliceRequest =
  { what: 'header' } | { what: 'manifest' } | { what: 'rows'; tensor: string; start: number; count: number };

export function frameHeader(kind: FrameKind, length: number): Buffer {
  const h = Buffer.allocUnsafe(5);
  h.writeUInt8(kind, 0);
  h.writeUInt32BE(length, 1);
  return h;
}

/**
 * Bytes a sender may queue on a socket before it waits: a few pieces, so that reading and
 * hashing the next piece overlaps sending the last (waiting for each to drain would leave
 * the link idle while the sender hashes).
 */
export const QUEUED_BYTES = 16 * 1024 * 1024;

/**
 * Writes one frame; resolves once fewer than QUEUED_BYTES wait in the socket (backpressure).
 * `sent` is called once the socket no longer needs the parts (their buffers may be reused).
 */
export function writeFrame(
  socket: Socket,
  kind: FrameKind,
  parts: readonly Uint8Array[],
  sent?: () => void,
): Promise<void> {
  const length = parts.reduce((n, p) => n + p.byteLength, 0);
  // corked: the header and the parts leave in one writev, not a small segment each
  socket.cork();
  socket.write(frameHeader(kind, length));
  parts.forEach((p, i) => socket.write(p, i === parts.length - 1 ? sent : undefined));
  socket.uncork();
  if (socket.writableLength < QUEUED_BYTES || socket.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      socket.off('drain', done);
      socket.off('close', done);
      resolve();
    };
    socket.on('drain', done);
    socket.on('close', done);
  });
}

/**
 * Writes one frame without waiting on backpressure; resolves once the socket has handed its
 * bytes to the kernel (their buffers may then be reused) or was destroyed. The caller bounds
 * how many it leaves queued.
 */
export function sendFrame(socket: Socket, kind: FrameKind, parts: readonly Uint8Array[]): Promise<void> {
  return new Promise((resolve) => {
    if (socket.destroyed) return resolve();
    const done = (): void => {
      socket.off('close', done);
      resolve();
    };
    socket.on('close', done);
    // an error (the socket destroyed) also ends the wait: the bytes are gone either way
    void writeFrame(socket, kind, parts, done);
  });
}

export function writeJson(socket: Socket, kind: FrameKind, value: unknown): Promise<void> {
  return writeFrame(socket, kind, [Buffer.from(JSON.stringify(value))]);
}

export function parseJson(frame: Frame): Record<string, unknown> {
  const v: unknown = JSON.parse(frame.payload.toString('utf8'));
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not a JSON object');
  return v as Record<string, unknown>;
}

/**
 * Assembles frames from bytes as they are read: each payload is allocated once, at its
 * length (or placed where `place` says), and the read bytes are copied into it (so the caller
 * may reuse its read buffer). A reader that asks `want()` before each read may read straight
 * into the placed body: bytes fed from that very view are not copied again. An oversized frame
 * ends the stream through `onBad`.
 */
export class FrameAssembler {
  private readonly header = Buffer.alloc(5);
  private headerHave = 0;
  private head: Buffer | undefined;
  private body: Uint8Array | undefined;
  /** Payload bytes of the current frame received so far (head first, then body). */
  private have = 0;
  private broken = false;

  constructor(
    private readonly onFrame: (f: Frame) => void,
    private readonly onBad: (why: string) => void,
    private readonly place?: FramePlace,
  ) {}

  /**
   * Where the next read may land: the rest of the current placed body (a view of its
   * destination), or undefined when the next bytes are a header or a fresh payload.
   */
  want(): Uint8Array | undefined {
    if (this.head === undefined || this.body === undefined || this.have < this.head.length) return undefined;
    return this.body.subarray(this.have - this.head.length);
  }

  feed(data: Uint8Array): void {
    let at = 0;
    while (!this.broken && at < data.length) {
      if (this.head === undefined) {
        const n = Math.min(5 - this.headerHave, data.length - at);
        this.header.set(data.subarray(at, at + n), this.headerHave);
        this.headerHave += n;
        at += n;
        if (this.headerHave < 5) return;
        this.headerHave = 0;
        if (!this.begin()) return;
      }
      at += this.fill(data, at);
    }
  }

  /** Sets up the payload of the frame whose header was just read; false when it is refused. */
  private begin(): boolean {
    const need = this.header.readUInt32BE(1);
    if (need > MAX_FRAME) {
      this.broken = true;
      this.onBad(`a slice frame of ${need} bytes exceeds ${MAX_FRAME}`);
      return false;
    }
    const placed = this.place?.(this.header.readUInt8(0), need);
    this.head = placed ? placed.head : Buffer.allocUnsafeSlow(need);
    this.body = placed?.body;
    this.have = 0;
    return true;
  }

  /** Copies payload bytes from data[at..] (none for bytes read straight into place); returns how many it took. */
  private fill(data: Uint8Array, at: number): number {
    const head = this.head!;
    const body = this.body;
    // bytes [0, head.length) of the payload go to head, the rest to body
    const total = head.length + (body?.length ?? 0);
    const n = Math.min(total - this.have, data.length - at);
    const inHead = Math.max(0, Math.min(n, head.length - this.have));
    if (inHead > 0) head.set(data.subarray(at, at + inHead), this.have);
    if (n > inHead) {
      const to = this.have + inHead - head.length;
      const from = data.subarray(at + inHead, at + n);
      if (from.buffer !== body!.buffer || from.byteOffset !== body!.byteOffset + to) body!.set(from, to);
    }
    this.have += n;
    if (this.have === total) {
      const kind = this.header.readUInt8(0);
      const f: Frame = body ? { kind, payload: head, body } : { kind, payload: head };
      this.head = undefined;
      this.body = undefined;
      this.onFrame(f);
    }
    return n;
  }
}

/** FrameAssembler's feed, for a reader that never reads into place. */
export function frameAssembler(
  onFrame: (f: Frame) => void,
  onBad: (why: string) => void,
  place?: FramePlace,
): (data: Uint8Array) => void {
  const a = new FrameAssembler(onFrame, onBad, place);
  return (data) => a.feed(data);
}

/** Splits a socket's bytes into frames (frameAssembler on its 'data' events). */
export function readFrames(socket: Socket, onFrame: (f: Frame) => void, onBad: (why: string) => void): void {
  const feed = frameAssembler(onFrame, onBad);
  socket.on('data', (data: Buffer) => feed(data));
}

/** A frame that breaks the slice protocol: the connection ends with this error. */
export function sliceProtocolError(why: string, address: string): TandemError {
  return new TandemError('CLUSTER_PROTOCOL', `the slice connection with ${address}: ${why}`, {
    hint: 'run the same tandem version on the coordinator and every node',
    details: { address },
  });
}
