import { DEFAULT_CONNECT_TIMEOUT_MS, DeviceBase, withDeadline } from './device-base.js';
import {
  SHM_BELL_BYTES as BELL_BYTES,
  SHM_RING_BYTES as RING_BYTES,
  SHM_RING_HEADER_BYTES as DATA,
} from './footprint.js';
import { ShmSegment, sweepStale } from './shm-ffi.js';
import { SHM_KEY_TABLE_BYTES, ShmKeyTable } from './shm-key-table.js';
import { POPULATED, segName, ShmTransport, SLEEPING, TICK_MS } from './shm-transport.js';
import {
  clientHandshake,
  newPsn,
  SideChannelBackedListener,
  SideChannelListener,
  type Authenticated,
} from './side-channel.js';
import type { AcceptOptions, ConnectOptions, Listener, ListenOptions, QueuePair } from './types.js';
import type { Region } from './memory.js';

/*
 * The shm provider: a device whose queue pairs are ShmTransports (shm-transport.ts: the
 * rings, the doorbell and the frame path), and the listener that accepts them.
 */

class ShmListener extends SideChannelBackedListener {
  constructor(
    private readonly device: ShmDevice,
    side: SideChannelListener,
  ) {
    super(side);
  }

  override async accept(options: AcceptOptions): Promise<QueuePair> {
    const peer = await this.side.next(options.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS, options.signal);
    try {
      const theirs = ShmSegment.open(String(peer.extra.ring), RING_BYTES + DATA, POPULATED);
      theirs.unlink();
      const bell = ShmSegment.open(String(peer.extra.bell), BELL_BYTES);
      const keys = ShmSegment.open(String(peer.extra.keys), SHM_KEY_TABLE_BYTES);
      const mine = ShmSegment.create(segName('ring'), RING_BYTES + DATA, POPULATED);
      const psn = newPsn();
      peer.welcome(psn, options.info ?? {}, {
        ring: mine.name,
        bell: this.device.bellName,
        keys: this.device.keysName,
        pd: options.pd.id,
      });
      return this.device.qpOn(peer, psn, options, { mine, theirs, bell, keys, pd: Number(peer.extra.pd) });
    } catch (e) {
      peer.socket.destroy();
      throw e;
    }
  }
}

/** Processes on one host: frames through shared-memory rings, busy-polled, then a doorbell sleep. */
export class ShmDevice extends DeviceBase {
  readonly provider = 'shm' as const;
  readonly name = 'shm0';
  private readonly bell: ShmSegment;
  private readonly bellCtl: Int32Array;
  private readonly keySegment: ShmSegment;
  private readonly keyTable: ShmKeyTable;
  private readonly transports = new Set<ShmTransport>();
  /** Polls every TICK_MS while the application polls or waits; stops (doorbell armed) once idle. */
  private ticker: NodeJS.Timeout | undefined;
  /** poll()/wait() ran since the last tick. */
  private busy = false;
  private knocksReceived = 0;
  /**
   * arm() set the doorbell flag since markActive() last cleared it. Only arm() sets the flag
   * (peers only clear it), so while this is false the flag is 0 and markActive, which runs
   * on every poll, need not read it.
   */
  private mayBeArmed = false;

  constructor() {
    super();
    sweepStale();
    this.bell = ShmSegment.create(segName('bell'), BELL_BYTES);
    this.bellCtl = new Int32Array(this.bell.buffer, 0, 16);
    this.keySegment = ShmSegment.create(segName('keys'), SHM_KEY_TABLE_BYTES);
    this.keyTable = new ShmKeyTable(this.keySegment.buffer);
    this.doorbell = { active: () => this.markActive(), arm: () => this.arm() };
    // allocated regions live in their own segment, published so peers can write them directly
    this.allocator = (length) => {
      this.checkOpen();
      const seg = ShmSegment.create(segName('mr'), length);
      const buffer = new Uint8Array(seg.buffer, 0, length);
      let slot = -1;
      return {
        buffer,
        registered: (r) => (slot = this.publish(r, seg.name)),
        release: () => {
          if (slot >= 0 && !this.closed) this.keyTable.remove(slot);
          seg.unlink(); // the pages go with the last view of `buffer`
        },
      };
    };
  }

  get bellName(): string {
    return this.bell.name;
  }

  get keysName(): string {
    return this.keySegment.name;
  }

  /** Puts a region in the key table; its slot, or -1 when the table is full (no direct writes then). */
  private publish(r: Region, name: string): number {
    const { rkey, access, addrHi, addrLo, length } = r;
    return this.keyTable.publish({ rkey, pdId: r.pd.id, access, addrHi, addrLo, length }, name);
  }

  /** For tests and diagnostics: knocks received, whether the 1 ms tick runs, whether the doorbell is armed. */
  doorbellState(): { knocksReceived: number; ticking: boolean; armed: boolean } {
    return {
      knocksReceived: this.knocksReceived,
      ticking: this.ticker !== undefined,
      armed: Atomics.load(this.bellCtl, SLEEPING) !== 0,
    };
  }

  /** The application polls or spins: peers need not knock; keep the tick going. */
  private markActive(): void {
    this.busy = true;
    if (this.mayBeArmed) {
      this.mayBeArmed = false;
      if (Atomics.load(this.bellCtl, SLEEPING) !== 0) Atomics.store(this.bellCtl, SLEEPING, 0);
    }
    if (this.ticker === undefined && this.transports.size > 0) this.startTicker();
  }

  /** Arms the doorbell, then re-checks the rings; false when work turned up (do not sleep). */
  private arm(): boolean {
    if (this.closed) return false;
    this.mayBeArmed = true;
    Atomics.store(this.bellCtl, SLEEPING, 1);
    return !this.engine.progress();
  }

  private startTicker(): void {
    this.ticker = setInterval(() => this.tick(), TICK_MS);
    this.ticker.unref();
  }

  private stopTicker(): void {
    if (this.ticker !== undefined) clearInterval(this.ticker);
    this.ticker = undefined;
  }

  private tick(): void {
    this.engine.progress();
    if (this.busy) {
      this.busy = false;
      return;
    }
    // idle for a whole tick: from now on the peers' knocks drive progress
    if (this.arm()) this.stopTicker();
  }

  /** A peer knocked: its frames are in our rings. Sleeping waits poll them; else we do. */
  private onKnock(): void {
    if (this.closed) return;
    this.knocksReceived++;
    const sleepers = this.engine.sleepers;
    if (sleepers !== undefined && sleepers.size > 0) {
      for (const cq of sleepers) cq.knocked();
      return;
    }
    this.engine.progress();
    if (this.ticker === undefined && !this.arm()) this.startTicker();
  }

  async listen(options: ListenOptions): Promise<Listener> {
    this.checkOpen();
    const side = new SideChannelListener('shm', options.secret, () => this.countAuthFailure());
    await side.start(options.host ?? '127.0.0.1', options.port ?? 0);
    return this.track(new ShmListener(this, side));
  }

  qpOn(
    peer: Authenticated,
    psn: number,
    options: AcceptOptions,
    s: { mine: ShmSegment; theirs: ShmSegment; bell: ShmSegment; keys: ShmSegment; pd: number },
  ): QueuePair {
    peer.reader.detach();
    const t = new ShmTransport(
      s.mine,
      s.theirs,
      s.bell,
      s.keys,
      s.pd,
      peer.socket,
      (x) => {
        this.transports.delete(x);
        if (this.transports.size === 0) this.stopTicker();
      },
      () => this.onKnock(),
    );
    this.transports.add(t);
    this.busy = true;
    if (this.ticker === undefined) this.startTicker();
    return this.makeQp({ transport: t, peerInfo: peer.info, sendPsn: psn, recvPsn: peer.psn }, options, true);
  }

  async connect(options: ConnectOptions): Promise<QueuePair> {
    this.checkOpen();
    const psn = newPsn();
    const mine = ShmSegment.create(segName('ring'), RING_BYTES + DATA, POPULATED);
    let gaveUp = false;
    let done: Authenticated | undefined;
    try {
      const peer = await withDeadline(
        clientHandshake('shm', options.host, options.port, options.secret, {
          psn,
          info: options.info ?? {},
          extra: () => ({
            ring: mine.name,
            bell: this.bell.name,
            keys: this.keySegment.name,
            pd: options.pd.id,
          }),
        }).then((p) => {
          if (gaveUp) p.socket.destroy();
          return (done = p);
        }),
        options.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
        options.signal,
        `connect to shm ${options.host}:${options.port}`,
        () => {
          gaveUp = true;
          done?.socket.destroy();
        },
      );
      try {
        const theirs = ShmSegment.open(String(peer.extra.ring), RING_BYTES + DATA, POPULATED);
        theirs.unlink();
        const bell = ShmSegment.open(String(peer.extra.bell), BELL_BYTES);
        const keys = ShmSegment.open(String(peer.extra.keys), SHM_KEY_TABLE_BYTES);
        return this.qpOn(peer, psn, options, { mine, theirs, bell, keys, pd: Number(peer.extra.pd) });
      } catch (e) {
        peer.socket.destroy();
        throw e;
      }
    } catch (e) {
      mine.unmap();
      throw e;
    }
  }

  override async close(): Promise<void> {
    if (this.closed) return;
    await super.close();
    this.stopTicker();
    this.bell.unmap();
    this.keySegment.unmap();
  }
}
