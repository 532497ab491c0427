import type { Socket } from 'node:net';
import { DEFAULT_CONNECT_TIMEOUT_MS, DeviceBase, withDeadline } from './device-base.js';
import { TCP_SCRATCH_BYTES as SCRATCH_BYTES, TCP_STAGING_BYTES as STAGING_BYTES } from './footprint.js';
import {
  clientHandshake,
  newPsn,
  SideChannelBackedListener,
  SideChannelListener,
  type Authenticated,
} from './side-channel.js';
import type { Transport, TransportEvents } from './transport.js';
import type { AcceptOptions, ConnectOptions, Listener, ListenOptions, QueuePair } from './types.js';
import { FrameDecoder, MalformedFrame } from './frame-decoder.js';
import { putU32 } from './wire.js';
import {
  EAGAIN,
  EINTR,
  MSG_DONTWAIT,
  MSG_NOSIGNAL,
  POLLIN,
  POLLOUT,
  SO_RCVBUF,
  SO_SNDBUF,
  TCP_USER_TIMEOUT,
  rawSocketLib,
  socketLib,
  type SocketLib,
} from './socket-ffi.js';

/** Connections are polled this often when no wait drives them. */
const BACKGROUND_POLL_MS = 1;
/**
 * After this many background polls in a row found nothing, the poller slows to IDLE_POLL_MS
 * until one finds something again. The application's own waits poll for themselves, so only
 * a passive peer's one-sided work and the EOF of a dead peer wait on it, for up to
 * IDLE_POLL_MS. An idle rank polled every 1 ms costs a measurable share of a core
 * (docs/fabric.md).
 */
const IDLE_AFTER_POLLS = 200;
const IDLE_POLL_MS = 10;
/** Frames up to this size are copied into one buffer and written at once. */
const COALESCE_BYTES = 64 * 1024;

/** Frames over a TCP stream: `u32 length | body`, length checked before anything is buffered. */
export class TcpTransport implements Transport {
  private events: TransportEvents | undefined;
  private isClosed = false;
  private readonly decoder = new FrameDecoder(
    (buf, off, len) => this.events?.frame(buf, off, len),
    (head, len) => this.events?.place?.(head, len),
    (head) => this.events?.placed?.(head),
  );

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

const READS_PER_POLL = 64;
/**
 * A read at a frame boundary behind a large frame takes at most this much: a whole scratch's
 * worth would carry most of the next large frame into scratch (under load, where the reader
 * comes late, nearly all of it), to be copied into its target from there. Small frames (ACKs,
 * credits) still arrive by the dozen per read.
 */
const BOUNDARY_READ = 4096;
/** Frames above this count as large for BOUNDARY_READ (the decoder places WRITEs above it). */
const LARGE_FRAME = 64 * 1024;
/**
 * SO_SNDBUF and SO_RCVBUF of a polled connection (the kernel caps them at wmem_max/rmem_max
 * and doubles them; they are limits, not allocations). Fixed sizes turn off the kernel's
 * autotuning, under which a connection settles, run by run, into one of two speeds; with
 * fixed buffers only the fast one is seen (docs/fabric.md, docs/collectives.md).
 * TANDEM_TCP_SOCKBUF sets them (0: autotune).
 */
const SOCKET_BUFFER_BYTES = 4 << 20;

/**
 * A path that goes down under a connection (a cable pulled, an interface set down) leaves it
 * open with nothing coming back, and the kernel would retransmit for many minutes. Data
 * unacknowledged for this long drops the connection instead: the queue pair fails with
 * peer_lost and the communicator names the pair, so a cluster can place around the link
 * within 3 s of its loss. The peer's kernel acknowledges whatever its process does (busy or
 * stopped), so a live path does not trip it; a peer that stops reading until its receive
 * buffer (SOCKET_BUFFER_BYTES) is full for this long does, as a dead peer would.
 */
const USER_TIMEOUT_MS = 2000;

/**
 * An end with nothing of its own in flight (a pipeline's last stage waiting for activations)
 * has no unacknowledged data to time out: after this long with nothing received, the kernel
 * probes the path (libuv then probes every second), and a probe unanswered past
 * USER_TIMEOUT_MS drops the connection as unacknowledged data does. A live peer's kernel
 * answers probes whatever its process does, so an idle but live connection stays up.
 */
const KEEPALIVE_IDLE_MS = 1000;

/**
 * Sets USER_TIMEOUT_MS and keepalive probes on a connection (the user timeout on Linux, where
 * koffi loads; elsewhere the kernel's default stays, the probes alone find a dead path, more
 * slowly, and the control channel's heartbeats find a dead peer).
 */
function failOnDeadPath(socket: Socket): void {
  socket.setKeepAlive(true, KEEPALIVE_IDLE_MS);
  const lib = rawSocketLib();
  const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (lib && TCP_USER_TIMEOUT !== undefined && typeof fd === 'number' && fd >= 0)
    lib.setTcpOption(fd, TCP_USER_TIMEOUT, USER_TIMEOUT_MS);
}

/** Queued pieces sent by one writev(2). */
const WRITEV_PARTS = 8;

/**
 * The busy-polled data path: after the handshake the socket's fd is read and written with
 * non-blocking recv/send through koffi, libuv no longer reads it. Progress comes from
 * completion-queue waits (spinning, then poll(2) for at most 1 ms) and from the device's
 * background poller; a reader mid-frame receives straight into the frame buffer.
 */
export class PolledTcpTransport implements Transport {
  private events: TransportEvents | undefined;
  private isClosed = false;
  private readonly decoder = new FrameDecoder(
    (buf, off, len) => {
      if (len > LARGE_FRAME) this.streaming = true;
      this.events?.frame(buf, off, len);
    },
    (head, len) => {
      this.streaming = true;
      return this.events?.place?.(head, len);
    },
    (head) => this.events?.placed?.(head),
  );
  private readonly scratch = new Uint8Array(SCRATCH_BYTES);
  private readonly staging = new Uint8Array(STAGING_BYTES);
  private staged = 0;
  /** Large frames are arriving: set by one, cleared by a boundary read filled with small frames (BOUNDARY_READ). */
  private streaming = false;
  private corked = false;
  private backlog: Uint8Array[] = [];
  private backlogHead = 0;
  /** Whether flush() may gather pieces into one writev (the socket is non-blocking). */
  private readonly gather: boolean;
  readonly fd: number;

  constructor(
    private readonly socket: Socket,
    private readonly early: Uint8Array,
    private readonly lib: SocketLib,
    private readonly onClose: (t: PolledTcpTransport) => void,
  ) {
    const handle = (socket as unknown as { _handle: { fd: number; readStop(): number } })._handle;
    handle.readStop();
    this.fd = handle.fd;
    // writev has no MSG_DONTWAIT: gather only on a non-blocking socket (libuv's always are)
    this.gather = lib.nonBlocking(this.fd);
    const buf = Number(process.env.TANDEM_TCP_SOCKBUF ?? SOCKET_BUFFER_BYTES);
    if (buf > 0) {
      lib.setIntOption(this.fd, SO_SNDBUF, buf);
      lib.setIntOption(this.fd, SO_RCVBUF, buf);
    }
  }

  get wantsWrite(): boolean {
    return this.backlogHead < this.backlog.length;
  }

  bind(events: TransportEvents): void {
    this.events = events;
    this.socket.on('error', () => undefined);
    if (this.early.length > 0) this.feed(this.early);
    if (!this.isClosed) this.events.batchEnd();
  }

  private feed(chunk: Uint8Array): boolean {
    try {
      this.decoder.push(chunk);
      return true;
    } catch (e) {
      if (!(e instanceof MalformedFrame)) throw e;
      this.shut(`malformed frame: ${e.message}`, true);
      return false;
    }
  }

  poll(): boolean {
    if (this.isClosed) return false;
    let did = this.wantsWrite && this.flush();
    let got = false;
    for (let k = 0; k < READS_PER_POLL && !this.isClosed; k++) {
      const direct = this.decoder.partialTarget();
      const target = direct ?? this.scratch;
      // at a frame boundary behind a large frame, read little: the next large frame's payload
      // then lands in its target, not in scratch and copied from there
      const want = direct !== undefined || !this.streaming ? target.length : BOUNDARY_READ;
      const n = this.lib.recv(this.fd, target, want, MSG_DONTWAIT);
      if (n > 0) {
        got = true;
        // a chunk filled with small frames ends streaming; a large frame in it sets it again
        // (the decoder's callbacks)
        if (direct === undefined && n === want) this.streaming = false;
        if (direct) {
          try {
            this.decoder.advance(n);
          } catch (e) {
            if (!(e instanceof MalformedFrame)) throw e;
            this.shut(`malformed frame: ${e.message}`, true);
          }
        } else if (!this.feed(this.scratch.subarray(0, n))) break;
        if (n < want) break;
        continue;
      }
      if (n === 0) {
        this.shut('the peer closed the connection', this.decoder.midFrame);
        break;
      }
      const errno = this.lib.errno();
      if (errno === EAGAIN || errno === EINTR) break;
      this.shut(`connection lost (errno ${errno})`, false);
      break;
    }
    if (got && !this.isClosed) this.events?.batchEnd();
    if (this.wantsWrite && !this.isClosed) did = this.flush() || did;
    return did || got;
  }

  /** While corked (one post: its frames and a due ACK), small frames gather in `staging`. */
  cork(): void {
    this.corked = true;
  }

  uncork(): void {
    this.corked = false;
    this.flushStaged();
  }

  /** Sends what gathered in `staging` with one syscall (the rest, if any, joins the backlog). */
  private flushStaged(): void {
    const n = this.staged;
    if (n === 0 || this.isClosed) return;
    this.staged = 0;
    if (this.backlogHead < this.backlog.length) {
      this.backlog.push(this.staging.slice(0, n));
      this.flush();
      return;
    }
    let sent = this.lib.send(this.fd, this.staging, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent === n) return;
    if (sent < 0) {
      const errno = this.lib.errno();
      if (errno !== EAGAIN && errno !== EINTR) return this.shut(`connection lost (errno ${errno})`, false);
      sent = 0;
    }
    this.backlog.push(this.staging.slice(sent, n));
  }

  sendFrom(header: Uint8Array, src: Uint8Array, off: number, len: number): void {
    if (this.isClosed) return;
    const total = header.length + len;
    if (!this.corked || this.staged + 4 + total > STAGING_BYTES) {
      this.send(header, [src.subarray(off, off + len)]);
      return;
    }
    const st = this.staging;
    let at = this.staged;
    putU32(st, at, total);
    st.set(header, at + 4);
    at += 4 + header.length;
    if (len <= 16) for (let i = 0; i < len; i++) st[at + i] = src[off + i] as number;
    else st.set(src.subarray(off, off + len), at);
    this.staged = at + len;
  }

  send(header: Uint8Array, payload: readonly Uint8Array[]): void {
    if (this.isClosed) return;
    let len = header.length;
    for (const p of payload) len += p.length;
    if (this.corked && this.staged + 4 + len <= STAGING_BYTES) {
      const st = this.staging;
      let at = this.staged;
      putU32(st, at, len);
      st.set(header, at + 4);
      at += 4 + header.length;
      for (const p of payload) {
        st.set(p, at);
        at += p.length;
      }
      this.staged = at;
      return;
    }
    // keep the order: what gathered so far goes first
    this.flushStaged();
    if (len <= 64 * 1024) {
      const frame = new Uint8Array(4 + len);
      putU32(frame, 0, len);
      frame.set(header, 4);
      let at = 4 + header.length;
      for (const p of payload) {
        frame.set(p, at);
        at += p.length;
      }
      this.backlog.push(frame);
    } else {
      const head = new Uint8Array(4 + header.length);
      putU32(head, 0, len);
      head.set(header, 4);
      this.backlog.push(head);
      for (const p of payload) if (p.length > 0) this.backlog.push(p);
    }
    this.flush();
  }

  sendRaw(bytes: Uint8Array): void {
    if (this.isClosed) return;
    this.backlog.push(bytes.slice());
    this.flush();
  }

  /**
   * Sends queued bytes until the socket buffer is full; true when anything went out. Up to
   * WRITEV_PARTS queued pieces leave in one writev(2) (a large frame is queued as its
   * header and its payload views: two send() calls before, and a lone header segment).
   */
  private flush(): boolean {
    let sent = false;
    while (this.backlogHead < this.backlog.length) {
      const count = this.gather ? Math.min(WRITEV_PARTS, this.backlog.length - this.backlogHead) : 1;
      let total = 0;
      let n: number;
      if (count === 1) {
        const b = this.backlog[this.backlogHead] as Uint8Array;
        total = b.length;
        n = this.lib.send(this.fd, b, b.length, MSG_DONTWAIT | MSG_NOSIGNAL);
      } else {
        const parts = this.backlog.slice(this.backlogHead, this.backlogHead + count);
        for (const p of parts) total += p.length;
        n = this.lib.writev(this.fd, parts);
      }
      if (n < 0) {
        const errno = this.lib.errno();
        if (errno === EAGAIN || errno === EINTR) break;
        this.shut(`connection lost (errno ${errno})`, false);
        return true;
      }
      sent = true;
      // drop what went out: whole pieces (empty ones too), then the front of a partly sent one
      let left = n;
      while (this.backlogHead < this.backlog.length) {
        const b = this.backlog[this.backlogHead] as Uint8Array;
        if (left < b.length) {
          if (left > 0) this.backlog[this.backlogHead] = b.subarray(left);
          break;
        }
        left -= b.length;
        this.backlogHead++;
      }
      if (n < total) break;
    }
    if (this.backlogHead === this.backlog.length) {
      this.backlog = [];
      this.backlogHead = 0;
    }
    return sent;
  }

  private shut(reason: string, malformed: boolean): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.backlog = [];
    this.socket.destroy();
    this.onClose(this);
    this.events?.closed(reason, malformed);
  }

  close(): void {
    if (this.isClosed) return;
    // send what is queued (acks, last writes) before closing, without waiting for it
    this.flush();
    this.shut('closed locally', false);
  }
}

class TcpListener extends SideChannelBackedListener {
  constructor(
    private readonly device: TcpDevice,
    side: SideChannelListener,
  ) {
    super(side);
  }

  override async accept(options: AcceptOptions): Promise<QueuePair> {
    const peer = await this.side.next(options.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS, options.signal);
    const psn = newPsn();
    peer.welcome(psn, options.info ?? {}, {});
    return this.device.qpOn(peer, psn, options);
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
    return this.track(new TcpListener(this, side));
  }

  private readonly lib = socketLib();
  private readonly polled = new Set<PolledTcpTransport>();
  /**
   * Every polled connection of every tcp device in this process. A sleeping wait blocks the
   * thread in poll(2), so it watches all of them: a wait on one device (a communicator's
   * idle pump) must not sit out data that another (a tensor-parallel exchange) waits for:
   * watching only its own, such an exchange waits out the whole sleep slice (docs/fabric.md).
   */
  private static readonly everywhere = new Set<PolledTcpTransport>();
  private poller: NodeJS.Timeout | undefined;
  /** Background polls in a row that found nothing (see IDLE_AFTER_POLLS). */
  private idlePolls = 0;
  private pollfds = new Uint8Array(0);

  /** The background poller's current period: 1 ms while there is traffic, IDLE_POLL_MS once idle. */
  get backgroundPollMs(): number {
    return this.idlePolls >= IDLE_AFTER_POLLS ? IDLE_POLL_MS : BACKGROUND_POLL_MS;
  }

  private schedulePoll(ms: number): void {
    this.poller = setTimeout(() => {
      this.idlePolls = this.engine.progress() ? 0 : this.idlePolls + 1;
      if (this.polled.size > 0 && this.poller !== undefined) this.schedulePoll(this.backgroundPollMs);
    }, ms);
    this.poller.unref();
  }

  qpOn(peer: Authenticated, psn: number, options: AcceptOptions): QueuePair {
    const early = peer.reader.detach();
    failOnDeadPath(peer.socket);
    const base = { peerInfo: peer.info, sendPsn: psn, recvPsn: peer.psn };
    if (this.lib === null)
      return this.makeQp({ ...base, transport: new TcpTransport(peer.socket, early) }, options, false);
    const t = new PolledTcpTransport(peer.socket, early, this.lib, (x) => {
      this.polled.delete(x);
      TcpDevice.everywhere.delete(x);
      if (this.polled.size === 0 && this.poller) {
        clearTimeout(this.poller);
        this.poller = undefined;
      }
    });
    this.polled.add(t);
    TcpDevice.everywhere.add(t);
    // background progress when nobody waits: acks, read responses, peer death (recv sees EOF)
    if (this.poller === undefined) this.schedulePoll(BACKGROUND_POLL_MS);
    return this.makeQp({ ...base, transport: t }, options, true);
  }

  /** poll(2) on every polled tcp connection of the process for at most `ms` (rounded up to 1 ms). */
  protected override sleep(ms: number): void {
    const lib = this.lib;
    const all = TcpDevice.everywhere;
    if (lib === null || this.polled.size === 0) return;
    const n = all.size;
    if (this.pollfds.length < n * 8) this.pollfds = new Uint8Array(n * 8);
    const view = new DataView(this.pollfds.buffer);
    let i = 0;
    for (const t of all) {
      view.setInt32(i * 8, t.fd, true);
      view.setInt16(i * 8 + 4, POLLIN | (t.wantsWrite ? POLLOUT : 0), true);
      view.setInt16(i * 8 + 6, 0, true);
      i++;
    }
    lib.poll(this.pollfds, n, Math.max(1, Math.ceil(ms)));
  }

  override async close(): Promise<void> {
    await super.close();
    if (this.poller) clearTimeout(this.poller);
    this.poller = undefined;
  }

  async connect(options: ConnectOptions): Promise<QueuePair> {
    this.checkOpen();
    const psn = newPsn();
    let done: Authenticated | undefined;
    let gaveUp = false;
    const peer = await withDeadline(
      clientHandshake('tcp', options.host, options.port, options.secret, {
        psn,
        info: options.info ?? {},
        extra: () => ({}),
      }).then((p) => {
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
