import type { Socket } from 'node:net';
import { DEFAULT_CONNECT_TIMEOUT_MS, DeviceBase, withDeadline } from './device-base.js';
import { clientHandshake, newPsn, SideChannelListener, type Authenticated } from './side-channel.js';
import type { Transport, TransportEvents } from './transport.js';
import type { AcceptOptions, ConnectOptions, Listener, ListenOptions, QueuePair } from './types.js';
import { FrameDecoder, MalformedFrame } from './wire.js';

/** Frames up to this size are copied into one buffer and written at once. */
const COALESCE_BYTES = 64 * 1024;

/** Frames over a TCP stream: `u32 length | body`, length checked before anything is buffered. */
export class TcpTransport implements Transport {
  private events: TransportEvents | undefined;
  private isClosed = false;
  private readonly decoder = new FrameDecoder((body) => this.events?.frame(body));

  constructor(
    private readonly socket: Socket,
    private readonly early: Buffer,
  ) {}

  bind(events: TransportEvents): void {
    this.events = events;
    const s = this.socket;
    s.on('data', (chunk: Buffer) => this.receive(chunk));
    s.on('error', () => undefined);
    s.on('close', () => this.shut('the peer closed the connection', false));
    if (this.early.length > 0) this.receive(this.early);
  }

  private receive(chunk: Uint8Array): void {
    if (this.isClosed) return;
    try {
      this.decoder.push(chunk);
    } catch (e) {
      if (!(e instanceof MalformedFrame)) throw e;
      return this.shut(`malformed frame: ${e.message}`, true);
    }
    if (!this.isClosed) this.events?.batchEnd();
  }

  send(header: Uint8Array, payload: readonly Uint8Array[]): void {
    if (this.isClosed) return;
    let len = header.length;
    for (const p of payload) len += p.length;
    if (len <= COALESCE_BYTES) {
      const frame = Buffer.allocUnsafe(4 + len);
      frame.writeUInt32LE(len, 0);
      frame.set(header, 4);
      let at = 4 + header.length;
      for (const p of payload) {
        frame.set(p, at);
        at += p.length;
      }
      this.socket.write(frame);
      return;
    }
    const head = Buffer.allocUnsafe(4 + header.length);
    head.writeUInt32LE(len, 0);
    head.set(header, 4);
    this.socket.cork();
    this.socket.write(head);
    for (const p of payload) this.socket.write(p);
    this.socket.uncork();
  }

  sendRaw(bytes: Uint8Array): void {
    if (!this.isClosed) this.socket.write(Buffer.from(bytes));
  }

  private shut(reason: string, malformed: boolean): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.socket.destroy();
    this.events?.closed(reason, malformed);
  }

  close(): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.socket.end();
    this.socket.destroySoon();
    this.events?.closed('closed locally', false);
  }
}

class TcpListener implements Listener {
  constructor(
    private readonly device: TcpDevice,
    private readonly side: SideChannelListener,
  ) {}

  get host(): string {
    return this.side.host;
  }

  get port(): number {
    return this.side.port;
  }

  get authFailures(): number {
    return this.side.authFailures;
  }

  async accept(options: AcceptOptions): Promise<QueuePair> {
    const peer = await this.side.next(options.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS, options.signal);
    const psn = newPsn();
    peer.welcome(psn, options.info ?? {}, {});
    return this.device.qpOn(peer, psn, options);
  }

  close(): Promise<void> {
    return this.side.close();
  }
}

/** A software RDMA over TCP: every one-sided request is validated by the responder. */
export class TcpDevice extends DeviceBase {
  readonly provider = 'tcp' as const;
  readonly name = 'tcp0';

  async listen(options: ListenOptions): Promise<Listener> {
    this.checkOpen();
    const side = new SideChannelListener('tcp', options.secret, () => this.countAuthFailure());
    await side.start(options.host ?? '127.0.0.1', options.port ?? 0);
    return new TcpListener(this, side);
  }

  qpOn(peer: Authenticated, psn: number, options: AcceptOptions): QueuePair {
    const early = peer.reader.detach();
    return this.makeQp({ transport: new TcpTransport(peer.socket, early), peerInfo: peer.info, sendPsn: psn, recvPsn: peer.psn }, options, false);
  }

  async connect(options: ConnectOptions): Promise<QueuePair> {
    this.checkOpen();
    const psn = newPsn();
    let done: Authenticated | undefined;
    let gaveUp = false;
    const peer = await withDeadline(
      clientHandshake('tcp', options.host, options.port, options.secret, { psn, info: options.info ?? {}, extra: () => ({}) }).then((p) => {
        if (gaveUp) p.socket.destroy();
        return (done = p);
      }),
      options.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
      options.signal,
      `connect to tcp ${options.host}:${options.port}`,
      () => {
        gaveUp = true;
        done?.socket.destroy();
      },
    );
    return this.qpOn(peer, psn, options);
  }
}
