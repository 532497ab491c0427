import type { Socket } from 'node:net';
import { TandemError } from '../../errors/index.js';

/**
 * The slice connection's frames, both ways: `[kind u8][length u32 BE][payload]`. The member
 * dials the coordinator's slice server, both prove the cluster secret (HMAC challenge-response,
 * as the control connection does, under their own roles), then the member asks and the
 * coordinator answers, one request at a time:
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
}

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

/** Writes one frame; resolves once fewer than QUEUED_BYTES wait in the socket (backpressure). */
export function writeFrame(socket: Socket, kind: FrameKind, ...parts: Uint8Array[]): Promise<void> {
  const length = parts.reduce((n, p) => n + p.byteLength, 0);
  socket.write(frameHeader(kind, length));
  for (const p of parts) socket.write(p);
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

export function writeJson(socket: Socket, kind: FrameKind, value: unknown): Promise<void> {
  return writeFrame(socket, kind, Buffer.from(JSON.stringify(value)));
}

export function parseJson(frame: Frame): Record<string, unknown> {
  const v: unknown = JSON.parse(frame.payload.toString('utf8'));
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not a JSON object');
  return v as Record<string, unknown>;
}

/**
 * Splits a socket's bytes into frames. An oversized frame ends the stream through `onBad`.
 * Pieces are kept as they arrive and joined once per frame (one copy of each payload).
 */
export function readFrames(socket: Socket, onFrame: (f: Frame) => void, onBad: (why: string) => void): void {
  const pieces: Buffer[] = [];
  let buffered = 0;
  let need = -1;
  let kind = 0;
  const take = (n: number): Buffer => {
    const out = pieces.length === 1 || pieces[0]!.length >= n ? null : Buffer.concat(pieces, buffered);
    if (out) {
      pieces.length = 0;
      pieces.push(out);
    }
    const first = pieces[0]!;
    const head = first.subarray(0, n);
    if (first.length === n) pieces.shift();
    else pieces[0] = first.subarray(n);
    buffered -= n;
    return head;
  };
  socket.on('data', (data: Buffer) => {
    pieces.push(data);
    buffered += data.length;
    for (;;) {
      if (need < 0) {
        if (buffered < 5) return;
        const h = take(5);
        kind = h.readUInt8(0);
        need = h.readUInt32BE(1);
        if (need > MAX_FRAME) {
          socket.removeAllListeners('data');
          return onBad(`a slice frame of ${need} bytes exceeds ${MAX_FRAME}`);
        }
      }
      if (buffered < need) return;
      const payload = need === 0 ? Buffer.alloc(0) : take(need);
      need = -1;
      onFrame({ kind, payload });
    }
  });
}

/** A frame that breaks the slice protocol: the connection ends with this error. */
export function sliceProtocolError(why: string, address: string): TandemError {
  return new TandemError('CLUSTER_PROTOCOL', `the slice connection with ${address}: ${why}`, {
    hint: 'run the same tandem version on the coordinator and every node',
    details: { address },
  });
}
