import { randomBytes } from 'node:crypto';
import { TandemError } from '../errors/index.js';
import {
  DEFAULT_CONNECT_TIMEOUT_MS,
  DeviceBase,
  proof,
  sameProof,
  secretBytes,
  withDeadline,
} from './device-base.js';
import type { Transport, TransportEvents } from './transport.js';
import type { AcceptOptions, ConnectOptions, Listener, ListenOptions, QueuePair } from './types.js';
import { FrameDecoder, MalformedFrame } from './frame-decoder.js';
import { putU32 } from './wire.js';
import { randomU32 } from './random.js';

/**
 * In-process transport: frames are copied at send time and delivered from a microtask,
 * through the same stream decoder as TCP (so raw-byte tests behave alike).
 */
class LoopbackTransport implements Transport {
  peer!: LoopbackTransport;
  private events: TransportEvents | undefined;
  private inbox: Uint8Array[] = [];
  private scheduled = false;
  private isClosed = false;
  private readonly decoder = new FrameDecoder((buf, off, len) => this.events?.frame(buf, off, len));

  bind(events: TransportEvents): void {
    this.events = events;
    if (this.inbox.length > 0) this.schedule();
  }

  send(header: Uint8Array, payload: readonly Uint8Array[]): void {
    let len = header.length;
    for (const p of payload) len += p.length;
    const frame = new Uint8Array(4 + len);
    putU32(frame, 0, len);
    frame.set(header, 4);
    let at = 4 + header.length;
    for (const p of payload) {
      frame.set(p, at);
      at += p.length;
    }
    this.peer.deliver(frame);
  }

  sendRaw(bytes: Uint8Array): void {
    this.peer.deliver(bytes.slice());
  }

  private deliver(bytes: Uint8Array): void {
    if (this.isClosed) return;
    this.inbox.push(bytes);
    this.schedule();
  }

  private schedule(): void {
    if (this.scheduled || this.events === undefined) return;
    this.scheduled = true;
    queueMicrotask(() => this.drain());
  }

  private drain(): void {
    this.scheduled = false;
    const batch = this.inbox;
    this.inbox = [];
    for (const bytes of batch) {
      if (this.isClosed) return;
      try {
        this.decoder.push(bytes);
      } catch (e) {
        if (!(e instanceof MalformedFrame)) throw e;
        this.shut(`malformed frame: ${e.message}`, true);
        return;
      }
    }
    if (!this.isClosed) this.events?.batchEnd();
  }

  private shut(reason: string, malformed: boolean): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.events?.closed(reason, malformed);
    this.peer.remoteClosed();
  }

  private remoteClosed(): void {
    if (this.isClosed) return;
    queueMicrotask(() => this.shut('peer closed the connection', false));
  }

  close(): void {
    this.shut('closed locally', false);
  }
}

interface PendingConnect {
  info: Record<string, unknown>;
  psn: number;
  transport: LoopbackTransport;
  accepted(info: Record<string, unknown>, psn: number): void;
}

/** Listeners of every loopback device in this process, by virtual port. */
const ports = new Map<number, LoopbackListener>();
let nextPort = 40000;

class LoopbackListener implements Listener {
  readonly host = 'loopback';
  authFailures = 0;
  readonly pending: PendingConnect[] = [];
  private readonly waiting: ((p: PendingConnect) => void)[] = [];
  readonly nonce = randomBytes(32);
  readonly proof: Buffer;

  constructor(
    private readonly device: LoopbackDevice,
    readonly port: number,
    secret: Buffer,
  ) {
    this.proof = proof(secret, 'tandem-loopback', this.nonce, Buffer.alloc(0));
  }

  offer(p: PendingConnect): void {
    const w = this.waiting.shift();
    if (w) w(p);
    else this.pending.push(p);
  }

  async accept(options: AcceptOptions): Promise<QueuePair> {
    const next = this.pending.shift();
    let taker: ((p: PendingConnect) => void) | undefined;
    const p =
      next ??
      (await withDeadline(
        new Promise<PendingConnect>((resolve) => this.waiting.push((taker = resolve))),
        options.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
        options.signal,
        `accept on loopback port ${this.port}`,
        () => this.waiting.splice(this.waiting.indexOf(taker!), 1),
      ));
    const server = new LoopbackTransport();
    server.peer = p.transport;
    p.transport.peer = server;
    const psn = randomU32();
    const qp = this.device.qpFor(server, options, p.info, psn, p.psn);
    p.accepted(options.info ?? {}, psn);
    return qp;
  }

  async close(): Promise<void> {
    ports.delete(this.port);
  }
}

export class LoopbackDevice extends DeviceBase {
  readonly provider = 'loopback' as const;
  readonly name = 'loopback0';

  async listen(options: ListenOptions): Promise<Listener> {
    this.checkOpen();
    let port = options.port ?? 0;
    if (port === 0) while (ports.has((port = nextPort++)));
    if (ports.has(port)) {
      throw new TandemError('FABRIC_CONNECT_FAILED', `loopback port ${port} is already listening`, {
        hint: 'use port 0 to pick a free one',
      });
    }
    const l = new LoopbackListener(this, port, secretBytes(options.secret));
    ports.set(port, l);
    return this.track(l);
  }

  qpFor(
    t: LoopbackTransport,
    options: AcceptOptions,
    peerInfo: Record<string, unknown>,
    sendPsn: number,
    recvPsn: number,
  ): QueuePair {
    return this.makeQp({ transport: t, peerInfo, sendPsn, recvPsn }, options, false);
  }

  async connect(options: ConnectOptions): Promise<QueuePair> {
    this.checkOpen();
    const l = ports.get(options.port);
    if (l === undefined) {
      throw new TandemError('FABRIC_CONNECT_FAILED', `nothing listens on loopback port ${options.port}`, {
        hint: 'start the listener first and pass its .port',
      });
    }
    const mine = proof(secretBytes(options.secret), 'tandem-loopback', l.nonce, Buffer.alloc(0));
    if (!sameProof(mine, l.proof)) {
      l.authFailures++;
      this.countAuthFailure();
      throw new TandemError(
        'FABRIC_AUTH_FAILED',
        `loopback port ${options.port} rejected the cluster secret`,
        {
          hint: 'give every rank the same cluster secret',
        },
      );
    }
    const client = new LoopbackTransport();
    const psn = randomU32();
    return withDeadline(
      new Promise<QueuePair>((resolve) => {
        l.offer({
          info: options.info ?? {},
          psn,
          transport: client,
          accepted: (info, serverPsn) => resolve(this.qpFor(client, options, info, psn, serverPsn)),
        });
      }),
      options.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
      options.signal,
      `connect to loopback port ${options.port}`,
    );
  }
}
