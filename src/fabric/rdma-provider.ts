import type { Socket } from 'node:net';
import { TandemError } from '../errors/index.js';
import { CQ, type ProgressEngine } from './completion-queue.js';
import { DEFAULT_CONNECT_TIMEOUT_MS, withDeadline } from './device-base.js';
import { chooseGid, RdmaContext, type GidChoice, type GidEntry } from './rdma-context.js';
import { decodeSetup, encodeSetup } from './rdma-endpoint.js';
import { RdmaDomain, RdmaRegionTable } from './rdma-memory.js';
import { RdmaQp } from './rdma-qp.js';
import { RdmaQueuePair } from './rdma-queue-pair.js';
import { checkQpType, RdmaCq, RdmaPd, verbsAccess, type QpType } from './rdma-resources.js';
import { CompletionSleeper } from './rdma-sleep.js';
import {
  clientHandshake,
  sendMessage,
  SideChannelBackedListener,
  SideChannelListener,
  type Authenticated,
  type PendingPeer,
} from './side-channel.js';
import {
  Access,
  type AcceptOptions,
  type CompletionQueue,
  type ConnectOptions,
  type Device,
  type DeviceStats,
  type Listener,
  type ListenOptions,
  type ProtectionDomain,
  type QueuePair,
} from './types.js';

/**
 * The rdma provider: the fabric's Device over one verbs device (rdma-context.ts and friends).
 * Completion queues are the fabric's CQ. Every queue pair of the device completes into one
 * verbs completion queue (a second one only once the first has no room: see VerbsCqShare),
 * whose completions go to the queue pair by qp_num and from there to the fabric CQ it was
 * given; so a wait polls one verbs queue per look, whatever the number of fabric CQs, and
 * sleeps on one completion channel (rdma-sleep.ts). Queue pairs are RdmaQueuePairs, set up
 * over the authenticated side channel:
 *   client: create its QP, handshake (proof carries its setup) -> welcome (the server's setup)
 *           -> INIT/RTR/RTS -> 'ready'
 *   server: the client's setup -> create its QP, INIT/RTR/RTS -> welcome -> waits for 'ready'
 * so both queue pairs are in RTS before either side may post.
 */

export interface RdmaDeviceOptions {
  /** The verbs device (default: TANDEM_RDMA_DEVICE, else the first one). */
  name?: string;
  /** Queue pair type (default: TANDEM_RDMA_QP, else rc; uc on macOS, whose driver offers only UC). */
  qpType?: QpType;
  /** Entries of each shared verbs completion queue (default SHARED_CQ_DEPTH; capped by the device's max_cqe). */
  cqDepth?: number;
}

/** Queue depths asked of the device (capped by its max_qp_wr and half a shared completion queue) and the inline sizes tried in turn. */
const QP_DEPTH = 1024;
const QP_SGES = 16;
const INLINE_TRIES = [256, 64, 0];
const DEFAULT_CQ_DEPTH = 16384;
/** Entries asked for each shared verbs completion queue (capped by the device's max_cqe). */
const SHARED_CQ_DEPTH = 65536;

/**
 * A verbs completion queue shared by queue pairs. It never overruns: a queue pair joins only
 * while its send and receive depths fit into the entries not yet promised to others, since at
 * most that many of its completions can be waiting at once.
 */
interface VerbsCqShare {
  cq: RdmaCq;
  depth: number;
  /** Entries not promised to a queue pair. */
  room: number;
}

const ALL_ACCESS = verbsAccess(Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ);

export class RdmaDevice implements Device {
  readonly provider = 'rdma' as const;
  readonly name: string;
  readonly qpType: QpType;
  readonly context: RdmaContext;
  readonly regions: RdmaRegionTable;
  readonly engine: ProgressEngine;
  private readonly gidTable: GidEntry[];
  private readonly pds: RdmaPd[] = [];
  /** The fabric completion queues made by this device. */
  private readonly cqs = new Set<CQ>();
  /** The verbs completion queues every queue pair of the device completes into (usually one). */
  private readonly shared: VerbsCqShare[] = [];
  private readonly shareOf = new Map<RdmaQp, { share: VerbsCqShare; entries: number }>();
  private readonly qps = new Map<number, RdmaQueuePair>();
  private readonly verbsQps: RdmaQp[] = [];
  private readonly listeners = new Set<Listener>();
  private readonly sleeper: CompletionSleeper;
  /** Entries of each shared verbs completion queue. */
  private readonly cqDepth: number;
  private authFailures = 0;
  private closed = false;

  constructor(options: RdmaDeviceOptions = {}) {
    const env = process.env;
    this.qpType = checkQpType(
      options.qpType ?? env.TANDEM_RDMA_QP ?? (process.platform === 'darwin' ? 'uc' : 'rc'),
    );
    this.context = RdmaContext.open(options.name ?? env.TANDEM_RDMA_DEVICE);
    this.name = this.context.name;
    this.regions = new RdmaRegionTable(
      this.name,
      this.context.attr.maxMr > 0 ? this.context.attr.maxMr : 0x7fffffff,
    );
    this.gidTable = this.context.gids();
    const cqDepth = options.cqDepth ?? SHARED_CQ_DEPTH;
    if (!Number.isInteger(cqDepth) || cqDepth < 2) {
      this.context.close();
      throw new TandemError('INVALID_ARGUMENT', `cqDepth must be an integer of at least 2, got ${cqDepth}`, {
        hint: 'leave it out for the default',
      });
    }
    this.cqDepth = Math.min(cqDepth, this.context.attr.maxCqe);
    this.sleeper = new CompletionSleeper(
      () => this.shared.map((share) => share.cq),
      () => this.progress(),
    );
    this.engine = {
      progress: () => this.progress(),
      spins: true,
      sleep: (ms: number) => this.sleeper.sleep(ms),
    };
  }

  /** Drains the shared verbs completion queues; each completion goes to its queue pair. */
  private progress(): boolean {
    let any = false;
    const list = this.shared;
    for (let i = 0; i < list.length; i++) {
      const rcq = (list[i] as VerbsCqShare).cq;
      for (;;) {
        const wcs = rcq.poll();
        if (wcs.length === 0) break;
        any = true;
        for (const wc of wcs) this.qps.get(wc.qpNum)?.onCompletion(wc);
        // a short batch emptied the queue: another look would only cost a call
        if (wcs.length < rcq.batch) break;
      }
    }
    return any;
  }

  /** Verbs completion queues the device's queue pairs complete into (one until it is full). */
  get verbsCqCount(): number {
    return this.shared.length;
  }

  allocPd(): ProtectionDomain {
    this.checkOpen();
    const pd = new RdmaPd(this.context);
    this.pds.push(pd);
    return new RdmaDomain(this, pd, this.regions);
  }

  createCq(options: { depth?: number } = {}): CompletionQueue {
    this.checkOpen();
    const depth = Math.min(options.depth ?? DEFAULT_CQ_DEPTH, this.context.attr.maxCqe);
    const cq = new CQ(this.engine, depth);
    this.cqs.add(cq);
    // a wait on it sleeps on the shared queue's channel, even before a queue pair exists
    if (this.shared.length === 0) this.newShare();
    return cq;
  }

  async listen(options: ListenOptions): Promise<Listener> {
    this.checkOpen();
    const side = new SideChannelListener('rdma', options.secret, () => this.authFailures++);
    await side.start(options.host ?? '127.0.0.1', options.port ?? 0);
    const l = new RdmaListener(this, side);
    if (this.closed) {
      // closed while the socket opened: close() did not see this listener
      await l.close();
      this.checkOpen();
    }
    this.listeners.add(l);
    return l;
  }

  forget(l: Listener): void {
    this.listeners.delete(l);
  }

  /** A verbs queue pair in RESET on this device with the fabric's completion queues. */
  makeQp(options: AcceptOptions): { qp: RdmaQp; pd: RdmaDomain } {
    this.checkOpen();
    const pd = options.pd;
    if (!(pd instanceof RdmaDomain) || pd.device !== this) {
      throw new TandemError('FABRIC_INVALID_REQUEST', 'the protection domain belongs to another device', {
        hint: 'allocate the PD with allocPd() on the device that makes the connection',
      });
    }
    this.checkCq(options.cq);
    this.checkCq(options.recvCq ?? options.cq);
    const a = this.context.attr;
    // a queue pair's send and receive depths together fit one shared completion queue
    const depth = Math.min(QP_DEPTH, a.maxQpWr, Math.floor(this.cqDepth / 2));
    let last: unknown;
    for (const maxInline of INLINE_TRIES) {
      const caps = { maxSendWr: depth, maxRecvWr: depth, maxSge: Math.min(QP_SGES, a.maxSge), maxInline };
      let share = this.shareWithRoom(2 * depth);
      for (;;) {
        let qp: RdmaQp;
        try {
          qp = new RdmaQp(pd.pd, this.qpType, share.cq, share.cq, caps);
        } catch (e) {
          last = e;
          break;
        }
        // the device may grant more than asked: promise what it granted
        const entries = qp.caps.maxSendWr + qp.caps.maxRecvWr;
        if (entries <= share.room) {
          share.room -= entries;
          this.shareOf.set(qp, { share, entries });
          this.verbsQps.push(qp);
          return { qp, pd };
        }
        qp.close();
        if (share.room === share.depth) {
          throw new TandemError(
            'FABRIC_PROVIDER_UNAVAILABLE',
            `${this.name} granted a queue pair ${entries} work requests for ${2 * depth} asked, more than a completion queue of ${share.depth} holds`,
            { hint: 'the device rounds queue depths up past its max_cqe; use another device or provider' },
          );
        }
        share = this.newShare();
      }
    }
    throw last;
  }

  private checkCq(cq: CompletionQueue): void {
    if (!(cq instanceof CQ) || !this.cqs.has(cq)) {
      throw new TandemError('FABRIC_INVALID_REQUEST', 'the completion queue belongs to another device', {
        hint: 'create the completion queues with createCq() on the device that makes the connection',
      });
    }
  }

  /** A shared verbs completion queue with `entries` not yet promised, made when none has them. */
  private shareWithRoom(entries: number): VerbsCqShare {
    return this.shared.find((s) => s.room >= entries) ?? this.newShare();
  }

  private newShare(): VerbsCqShare {
    const depth = this.cqDepth;
    const share = { cq: new RdmaCq(this.context, depth), depth, room: depth };
    this.shared.push(share);
    return share;
  }

  /** The GID for traffic leaving through `localAddress` (TANDEM_RDMA_IPV4 overrides it). */
  gidFor(socket: Socket): GidChoice {
    const local = process.env.TANDEM_RDMA_IPV4 ?? socket.localAddress?.replace(/^::ffff:/, '');
    const choice = chooseGid(this.gidTable, local);
    if (choice === undefined) {
      throw new TandemError('FABRIC_PROVIDER_UNAVAILABLE', `${this.name} port 1 has no usable GID`, {
        hint: 'give the RDMA interface an IP address (RoCE) or check the subnet manager (InfiniBand); tandem devinfo lists the GIDs',
      });
    }
    return choice;
  }

  /** INIT -> RTR -> RTS towards the peer whose setup arrived on the side channel. */
  bring(qp: RdmaQp, gid: GidChoice, extra: Record<string, unknown>, peer: string): void {
    const setup = decodeSetup(extra, this.qpType, peer);
    qp.connect(setup, gid.index, ALL_ACCESS);
  }

  /** Wraps a connected verbs queue pair; the side channel now only tells whether the peer lives. */
  adopt(qp: RdmaQp, pd: RdmaDomain, options: AcceptOptions, peer: Authenticated): QueuePair {
    peer.reader.detach();
    const cq = options.cq as CQ;
    const recvCq = (options.recvCq ?? options.cq) as CQ;
    const q = new RdmaQueuePair(qp, pd, cq, recvCq, peer.socket, peer.info, () => {});
    this.qps.set(q.qpNum, q);
    return q;
  }

  async connect(options: ConnectOptions): Promise<QueuePair> {
    const { qp, pd } = this.makeQp(options);
    const where = `${options.host}:${options.port}`;
    let gid: GidChoice | undefined;
    let done: Authenticated | undefined;
    let gaveUp = false;
    try {
      const peer = await withDeadline(
        clientHandshake('rdma', options.host, options.port, options.secret, {
          psn: qp.psn,
          info: options.info ?? {},
          extra: (socket) => {
            gid = this.gidFor(socket);
            return encodeSetup({ qpType: this.qpType, ...qp.endpoint(gid.gid) });
          },
        }).then((p) => {
          if (gaveUp) p.socket.destroy();
          return (done = p);
        }),
        options.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
        options.signal,
        `connect to rdma ${where}`,
        () => {
          gaveUp = true;
          done?.socket.destroy();
        },
      );
      try {
        // the device may have closed while the handshake ran: its queue pairs are destroyed then
        this.checkOpen();
        this.bring(qp, gid as GidChoice, peer.extra, where);
        sendMessage(peer.socket, { t: 'ready' });
        return this.adopt(qp, pd, options, peer);
      } catch (e) {
        peer.socket.destroy();
        throw e;
      }
    } catch (e) {
      this.dropQp(qp);
      throw e;
    }
  }

  /** Destroys a queue pair of this device once: one the device's close() destroyed is not touched again. */
  dropQp(qp: RdmaQp): void {
    const i = this.verbsQps.indexOf(qp);
    if (i < 0) return;
    this.verbsQps.splice(i, 1);
    qp.close();
    const held = this.shareOf.get(qp);
    if (held) held.share.room += held.entries;
    this.shareOf.delete(qp);
  }

  stats(): DeviceStats {
    // the NIC validates and acknowledges one-sided requests; it keeps no counters of ours
    return {
      rejectedKey: 0,
      rejectedAccess: 0,
      rejectedBounds: 0,
      rejectedInvalid: 0,
      malformedFrames: 0,
      authFailures: this.authFailures,
      acksSent: 0,
    };
  }

  /** Throws FABRIC_CLOSED once close() began: every verbs object of the device is (being) destroyed. */
  checkOpen(): void {
    if (this.closed) {
      throw new TandemError('FABRIC_CLOSED', `rdma device ${this.name} is closed`, {
        hint: 'open a new device with openDevice()',
      });
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const l of [...this.listeners]) await l.close();
    for (const q of this.qps.values()) await q.close();
    for (const qp of this.verbsQps.splice(0)) qp.close();
    for (const r of [...this.regions.byLkey.values()]) if (r.pd.device === this) r.deregister();
    this.shareOf.clear();
    for (const cq of this.cqs) cq.abort('the device closed');
    for (const s of this.shared.splice(0)) s.cq.close();
    for (const pd of this.pds) pd.close();
    this.context.close();
  }
}

class RdmaListener extends SideChannelBackedListener {
  constructor(
    private readonly device: RdmaDevice,
    side: SideChannelListener,
  ) {
    super(side);
  }

  override async accept(options: AcceptOptions): Promise<QueuePair> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    const peer: PendingPeer = await this.side.next(timeoutMs, options.signal);
    const where = `${peer.socket.remoteAddress ?? '?'}:${peer.socket.remotePort ?? '?'}`;
    let made: ReturnType<RdmaDevice['makeQp']> | undefined;
    try {
      made = this.device.makeQp(options);
      const gid = this.device.gidFor(peer.socket);
      this.device.bring(made.qp, gid, peer.extra, where);
      peer.welcome(made.qp.psn, options.info ?? {}, {
        ...encodeSetup({ qpType: this.device.qpType, ...made.qp.endpoint(gid.gid) }),
      });
      const ready = await withDeadline(
        peer.reader.next(),
        timeoutMs,
        options.signal,
        `rdma setup with ${where}`,
      );
      if (ready.t !== 'ready') throw new Error(`expected 'ready', got '${String(ready.t)}'`);
      this.device.checkOpen();
      return this.device.adopt(made.qp, made.pd, options, peer);
    } catch (e) {
      peer.socket.destroy();
      if (made) this.device.dropQp(made.qp);
      if (e instanceof TandemError) throw e;
      throw new TandemError(
        'FABRIC_CONNECT_FAILED',
        `rdma setup with ${where} failed: ${(e as Error).message}`,
        {
          hint: 'the peer went away during setup; start it again',
        },
      );
    }
  }

  override async close(): Promise<void> {
    this.device.forget(this);
    await super.close();
  }
}
