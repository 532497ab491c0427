import { randomBytes } from 'node:crypto';
import { Socket, createConnection, createServer, type Server } from 'node:net';
import { TandemError } from '../errors/index.js';
import { proof, sameProof, secretBytes } from './device-base.js';
import { randomU32 } from './random.js';
import type { AcceptOptions, Listener, ProviderName, QueuePair } from './types.js';

/**
 * The authenticated side channel every networked provider sets connections up with.
 * Messages are `u32 LE length | JSON` (at most 64 KiB). Handshake, both ends proving the
 * cluster secret without sending it (HMAC-SHA256 over role, provider and both nonces):
 *   client -> hello { provider, nonce: cN }
 *   server -> challenge { nonce: sN, proof: H(secret, 'server:'+provider, cN, sN) }
 *   client -> proof { proof: H(secret, 'client:'+provider, sN, cN), psn, info, extra }   (or abort)
 *   server -> welcome { psn, info, extra }  once accept() takes it                       (or denied)
 * After that the socket belongs to the provider (tcp: data frames; shm: liveness).
 */
const MAX_MESSAGE = 64 * 1024;
const HANDSHAKE_MS = 10_000;

export type Message = Record<string, unknown>;

export class MessageReader {
  private buf: Buffer = Buffer.alloc(0);
  private waiting: { resolve(m: Message): void; reject(e: Error): void } | undefined;
  private failure: Error | undefined;
  private readonly onData = (chunk: Buffer): void => this.push(chunk);
  private readonly onEnd = (): void => this.fail(new Error('the peer closed the connection'));
  private readonly onError = (e: Error): void => this.fail(e);

  constructor(private readonly socket: Socket) {
    socket.on('data', this.onData);
    socket.on('close', this.onEnd);
    socket.on('error', this.onError);
  }

  private push(chunk: Buffer): void {
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    const w = this.waiting;
    if (w === undefined) return;
    const m = this.parse();
    if (m === undefined) return;
    this.waiting = undefined;
    if (m instanceof Error) w.reject(m);
    else w.resolve(m);
  }

  /** One whole message off the front of the buffer (never more: data frames may follow). */
  private parse(): Message | Error | undefined {
    if (this.buf.length < 4) return undefined;
    const len = this.buf.readUInt32LE(0);
    if (len > MAX_MESSAGE) return (this.failure = new Error(`side-channel message of ${len} bytes`));
    if (this.buf.length < 4 + len) return undefined;
    let msg: unknown;
    try {
      msg = JSON.parse(this.buf.subarray(4, 4 + len).toString('utf8'));
    } catch {
      return (this.failure = new Error('side-channel message is not JSON'));
    }
    this.buf = this.buf.subarray(4 + len);
    if (typeof msg !== 'object' || msg === null)
      return (this.failure = new Error('side-channel message is not an object'));
    return msg as Message;
  }

  private fail(e: Error): void {
    this.failure ??= e;
    const w = this.waiting;
    this.waiting = undefined;
    w?.reject(e);
  }

  next(): Promise<Message> {
    const m = this.parse();
    if (m instanceof Error) return Promise.reject(m);
    if (m) return Promise.resolve(m);
    if (this.failure) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
    });
  }

  /** Stops reading messages; returns bytes that arrived after the last one. */
  detach(): Buffer {
    this.socket.off('data', this.onData);
    this.socket.off('close', this.onEnd);
    this.socket.off('error', this.onError);
    return this.buf;
  }
}

export function sendMessage(socket: Socket, msg: Message): void {
  const body = Buffer.from(JSON.stringify(msg), 'utf8');
  const head = Buffer.alloc(4);
  head.writeUInt32LE(body.length, 0);
  socket.write(Buffer.concat([head, body]));
}

const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');
const unhex = (v: unknown): Buffer =>
  typeof v === 'string' && /^[0-9a-f]*$/.test(v) ? Buffer.from(v, 'hex') : Buffer.alloc(0);

export interface Authenticated {
  socket: Socket;
  reader: MessageReader;
  /** The peer's first psn, metadata and provider-specific setup. */
  psn: number;
  info: Record<string, unknown>;
  extra: Record<string, unknown>;
}

function asRecord(v: unknown): Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
}

function authError(what: string, host: string, port: number): TandemError {
  return new TandemError('FABRIC_AUTH_FAILED', `authentication with ${host}:${port} failed: ${what}`, {
    hint: 'give every rank the same cluster secret, and check that host:port is a tandem listener of the same provider',
  });
}

/** Client side: connect, prove the secret, check the server's proof, send our setup, await the welcome. */
export async function clientHandshake(
  provider: ProviderName,
  host: string,
  port: number,
  secret: string | Uint8Array,
  setup: { psn: number; info: Record<string, unknown>; extra: (socket: Socket) => Record<string, unknown> },
): Promise<Authenticated> {
  const key = secretBytes(secret);
  const socket = await new Promise<Socket>((resolve, reject) => {
    const s = createConnection({ host, port });
    s.once('connect', () => resolve(s));
    s.once('error', (e) =>
      reject(
        new TandemError('FABRIC_CONNECT_FAILED', `cannot connect to ${host}:${port}: ${e.message}`, {
          hint: 'start the listener first and check host and port',
          details: { errno: (e as NodeJS.ErrnoException).code ?? null },
          cause: e,
        }),
      ),
    );
  });
  socket.setNoDelay(true);
  const reader = new MessageReader(socket);
  try {
    const cN = randomBytes(32);
    sendMessage(socket, { t: 'hello', v: 1, provider, nonce: hex(cN) });
    const ch = await reader.next().catch((e: Error) => {
      throw authError(`no challenge (${e.message})`, host, port);
    });
    if (ch.t !== 'challenge') throw authError(`unexpected '${String(ch.t)}' message`, host, port);
    const sN = unhex(ch.nonce);
    if (sN.length !== 32 || !sameProof(unhex(ch.proof), proof(key, `server:${provider}`, cN, sN))) {
      sendMessage(socket, { t: 'abort' });
      await reader.next().catch(() => undefined);
      throw authError('the listener does not know the cluster secret', host, port);
    }
    sendMessage(socket, {
      t: 'proof',
      proof: hex(proof(key, `client:${provider}`, sN, cN)),
      psn: setup.psn,
      info: setup.info,
      extra: setup.extra(socket),
    });
    const w = await reader.next().catch((e: Error) => {
      throw authError(`the listener closed the connection (${e.message})`, host, port);
    });
    if (w.t !== 'welcome') throw authError(`the listener answered '${String(w.t)}'`, host, port);
    return { socket, reader, psn: Number(w.psn) >>> 0, info: asRecord(w.info), extra: asRecord(w.extra) };
  } catch (e) {
    socket.destroy();
    throw e;
  }
}

/** A server-side connection that proved the secret and waits for accept(). */
export interface PendingPeer extends Authenticated {
  welcome(psn: number, info: Record<string, unknown>, extra: Record<string, unknown>): void;
}

/** Listens, authenticates every incoming peer, and queues the ones that pass. */
export class SideChannelListener {
  authFailures = 0;
  private readonly ready: PendingPeer[] = [];
  private readonly waiters: ((p: PendingPeer) => void)[] = [];
  private server: Server | undefined;
  host = '';
  port = 0;

  constructor(
    private readonly provider: ProviderName,
    secret: string | Uint8Array,
    private readonly onAuthFailure: () => void,
  ) {
    this.key = secretBytes(secret);
  }

  private readonly key: Buffer;

  async start(host: string, port: number): Promise<void> {
    const server = createServer((s) => void this.handshake(s));
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', (e) =>
        reject(
          new TandemError('FABRIC_CONNECT_FAILED', `cannot listen on ${host}:${port}: ${e.message}`, {
            hint: 'pick another port or use 0',
            cause: e,
          }),
        ),
      );
      server.listen(port, host, () => resolve());
    });
    const addr = server.address();
    this.host = host;
    this.port = typeof addr === 'object' && addr !== null ? addr.port : port;
  }

  private async handshake(socket: Socket): Promise<void> {
    socket.setNoDelay(true);
    const reader = new MessageReader(socket);
    const timer = setTimeout(() => socket.destroy(), HANDSHAKE_MS);
    try {
      const hello = await reader.next();
      const cN = unhex(hello.nonce);
      if (hello.t !== 'hello' || hello.provider !== this.provider || cN.length !== 32)
        throw new Error('bad hello');
      const sN = randomBytes(32);
      sendMessage(socket, {
        t: 'challenge',
        nonce: hex(sN),
        proof: hex(proof(this.key, `server:${this.provider}`, cN, sN)),
      });
      const p = await reader.next();
      if (p.t !== 'proof' || !sameProof(unhex(p.proof), proof(this.key, `client:${this.provider}`, sN, cN))) {
        clearTimeout(timer);
        this.authFailures++;
        this.onAuthFailure();
        sendMessage(socket, { t: 'denied' });
        socket.end();
        return;
      }
      clearTimeout(timer);
      const peer: PendingPeer = {
        socket,
        reader,
        psn: Number(p.psn) >>> 0,
        info: asRecord(p.info),
        extra: asRecord(p.extra),
        welcome: (psn, info, extra) => sendMessage(socket, { t: 'welcome', psn, info, extra }),
      };
      const w = this.waiters.shift();
      if (w) w(peer);
      else this.ready.push(peer);
    } catch {
      clearTimeout(timer);
      socket.destroy();
    }
  }

  /** The next authenticated peer; rejects at the deadline. */
  next(timeoutMs: number, signal: AbortSignal | undefined): Promise<PendingPeer> {
    const p = this.ready.shift();
    if (p) return Promise.resolve(p);
    return new Promise((resolve, reject) => {
      const taker = (peer: PendingPeer): void => {
        cleanup();
        resolve(peer);
      };
      const cleanup = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        const i = this.waiters.indexOf(taker);
        if (i >= 0) this.waiters.splice(i, 1);
      };
      const onAbort = (): void => {
        cleanup();
        reject(
          new TandemError('ABORTED', `accept on ${this.host}:${this.port} aborted`, {
            hint: 'the caller aborted the accept',
          }),
        );
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(
          new TandemError(
            'FABRIC_WAIT_TIMEOUT',
            `no authenticated peer connected to ${this.host}:${this.port} within ${timeoutMs} ms`,
            {
              hint: 'start the other ranks with the same secret, or raise the timeout',
            },
          ),
        );
      }, timeoutMs);
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort);
      this.waiters.push(taker);
    });
  }

  async close(): Promise<void> {
    for (const p of this.ready.splice(0)) p.socket.destroy();
    // stop accepting; established connections belong to their queue pairs (close() would wait for them)
    this.server?.close();
    this.server = undefined;
  }
}

export const newPsn = randomU32;

/**
 * A fabric listener whose peers arrive through the authenticated side channel; providers
 * differ only in how an accepted peer becomes a queue pair.
 */
export abstract class SideChannelBackedListener implements Listener {
  constructor(protected readonly side: SideChannelListener) {}

  get host(): string {
    return this.side.host;
  }

  get port(): number {
    return this.side.port;
  }

  get authFailures(): number {
    return this.side.authFailures;
  }

  abstract accept(options: AcceptOptions): Promise<QueuePair>;

  close(): Promise<void> {
    return this.side.close();
  }
}
