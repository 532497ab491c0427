/**
 * The fabric's public API: the RDMA verbs model, identical for every provider (loopback,
 * shm, tcp, rdma). Collectives are written against these interfaces only.
 *
 * Life of a connection:
 *   const dev = await openDevice('tcp');
 *   const pd = dev.allocPd();  const cq = dev.createCq();
 *   const listener = await dev.listen({ host: '127.0.0.1', port: 0, secret });   // rank 0
 *   const qp = await listener.accept({ pd, cq, timeoutMs: 10_000 });
 *   const qp = await dev.connect({ host, port: listener.port, secret, pd, cq, timeoutMs }); // rank 1
 *   const mr = pd.allocate(1 << 20, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
 *   qp.postRecv({ wrId: 1, sgl: [mr.sge(0, 4096)] });
 *   qp.postSend({ wrId: 2, opcode: 'write', sgl: [mr.sge(0, 64)], remote: peerMr });
 *   const wcs = await cq.wait({ timeoutMs: 5000 });   // throws on deadline or abort
 */

export type ProviderName = 'loopback' | 'shm' | 'tcp' | 'rdma';

/** Access flags of a memory region; none by default (local read is always allowed). */
export const Access = {
  NONE: 0,
  LOCAL_WRITE: 1,
  REMOTE_WRITE: 2,
  REMOTE_READ: 4,
} as const;
export type AccessFlags = number;

/** A scatter-gather element: `length` bytes at virtual address `addr` of the region `lkey`. */
export interface Sge {
  addr: bigint;
  length: number;
  lkey: number;
}

/** What a peer needs to reach a region one-sidedly: its address and remote key. */
export interface RemoteAddress {
  addr: bigint;
  rkey: number;
}

/** A remote region as exchanged between ranks (e.g. in SEND payloads or peerInfo). */
export interface RemoteRegion extends RemoteAddress {
  length: number;
}

export interface MemoryRegion {
  readonly pd: ProtectionDomain;
  /** Local key, used in this process's SGEs. Random, unique among live regions. */
  readonly lkey: number;
  /** Remote key: random 32-bit, never 0, never a live duplicate, no fixed step. */
  readonly rkey: number;
  /** Virtual base address (64-bit); remote addresses are `addr + offset`. */
  readonly addr: bigint;
  readonly length: number;
  readonly access: AccessFlags;
  /** The registered bytes. For `allocate`d regions on shm this lives in shared memory. */
  readonly buffer: Uint8Array;
  readonly live: boolean;
  sge(offset?: number, length?: number): Sge;
  remote(offset?: number): RemoteAddress;
  /** `{ addr, rkey, length }` to hand to a peer. */
  describe(): RemoteRegion;
  /** Ends the registration: later remote requests with this key fail with remote_key. */
  deregister(): void;
}

export interface ProtectionDomain {
  readonly id: number;
  readonly device: Device;
  /** Registers caller-owned memory. */
  register(buffer: Uint8Array, access: AccessFlags): MemoryRegion;
  /** Allocates and registers memory the provider chooses (shared memory on shm: fastest). */
  allocate(length: number, access: AccessFlags): MemoryRegion;
  createPool(options?: PoolOptions): RegistrationPool;
}

export interface PoolOptions {
  access?: AccessFlags;
  /** Bytes registered at once when the pool grows (default 16 MiB). */
  chunkBytes?: number;
}

/** A slice of a pooled registration; `sge()` / `remote()` address inside the slice. */
export interface PoolSlice {
  readonly mr: MemoryRegion;
  readonly offset: number;
  readonly length: number;
  readonly view: Uint8Array;
  sge(offset?: number, length?: number): Sge;
  remote(offset?: number): RemoteAddress;
  release(): void;
}

export interface PoolStats {
  /** Slices served from an existing registration. */
  hits: number;
  /** Slices that needed a new registration. */
  misses: number;
  regions: number;
  bytesRegistered: number;
  slicesInUse: number;
}

/** Registers big chunks once and hands out slices (registration is expensive on RDMA). */
export interface RegistrationPool {
  acquire(length: number): PoolSlice;
  stats(): PoolStats;
  /** Deregisters every chunk; slices still held become invalid. */
  close(): void;
}

export type Opcode = 'send' | 'write' | 'write_imm' | 'read';
export type CompletionOpcode = Opcode | 'recv' | 'recv_imm';

export interface SendWr {
  wrId: number;
  opcode: Opcode;
  sgl: readonly Sge[];
  /** Required for write, write_imm and read. */
  remote?: RemoteAddress;
  /** 32-bit immediate for write_imm. */
  imm?: number;
  /** false: no completion on success (errors always complete). Default true. */
  signaled?: boolean;
  /**
   * The payload is copied before postSend returns, so its buffer may be reused at once (verbs'
   * IBV_SEND_INLINE). Sends and writes of at most MAX_INLINE bytes; postSend throws
   * FABRIC_INVALID_REQUEST for a longer one or a read.
   */
  inline?: boolean;
}

/**
 * The longest inline send or write (SendWr.inline), in bytes: room for a 16 KiB all-reduce's
 * board entry (its payload with a head and a tail, docs/collectives.md).
 */
export const MAX_INLINE = 32 * 1024;

export interface RecvWr {
  wrId: number;
  sgl: readonly Sge[];
}

/**
 * Completion statuses. Only `success` is success.
 * - local_protection: an SGE names a dead/foreign lkey, lacks LOCAL_WRITE, or is out of range
 * - local_length: a received message is longer than the posted receive buffers
 * - remote_key: unknown, deregistered or other-domain remote key
 * - remote_access: the region lacks REMOTE_WRITE / REMOTE_READ
 * - remote_bounds: the range is outside the region (below, past the end, wrapping, >= 2^31)
 * - remote_invalid: the responder rejected the request (e.g. no receive for write_imm)
 * - peer_lost: the connection died (peer process gone, malformed frame, closed)
 * - flushed: the queue pair was already in error when this request was pending or posted
 * - timeout: no answer within the queue pair's timeout
 */
export type WcStatus =
  | 'success'
  | 'local_protection'
  | 'local_length'
  | 'remote_key'
  | 'remote_access'
  | 'remote_bounds'
  | 'remote_invalid'
  | 'peer_lost'
  | 'flushed'
  | 'timeout';

export interface WorkCompletion {
  wrId: number;
  status: WcStatus;
  opcode: CompletionOpcode;
  /** Bytes received (recv, recv_imm) or transferred. */
  byteLen: number;
  /** Immediate of recv_imm. */
  imm?: number;
  qpNum: number;
}

export interface WaitOptions {
  /** Deadline relative to now. Default 30000. On expiry wait() throws FABRIC_WAIT_TIMEOUT. */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Resolve once at least this many completions are available (default 1). */
  min?: number;
  /** At most this many completions returned (default unlimited). */
  max?: number;
  /**
   * Whether the wait may busy-poll before it sleeps: true (default) for an adaptive window
   * (see SpinPolicy), a number for a fixed window of that many microseconds after the last
   * activity (when the caller knows its peer answers within it and the core is its own),
   * false never (when this host runs more busy threads than it has cores).
   */
  spin?: boolean | number;
}

export interface CompletionQueue {
  /** Non-blocking: drives progress once and returns up to `max` completions. */
  poll(max?: number): readonly WorkCompletion[];
  /**
   * poll(1) without the array: drives progress once and returns the oldest completion, or
   * undefined. For busy-poll loops that take one completion at a time (a ping-pong), where
   * poll(1)'s array would be the only allocation.
   */
  pollOne(): WorkCompletion | undefined;
  /**
   * Busy-polls for a bounded time, then sleeps, always letting timers and sockets run.
   * Throws FABRIC_WAIT_TIMEOUT at the deadline and ABORTED on abort()/signal.
   */
  wait(options?: WaitOptions): Promise<WorkCompletion[]>;
  /** Ends every blocked wait on this queue with ABORTED (within 200 ms). */
  abort(reason?: string): void;
  readonly depth: number;
  /**
   * True when a sleeping wait() blocks the thread in the kernel in slices of about 1 ms, with
   * an event-loop turn between them (tcp); false when it leaves the event loop free until a
   * peer or a completion wakes it (shm's doorbell, event-driven pipes). Where it is true, a
   * waiter idle for long is cheaper polling from a timer (1,000 wake-ups a second otherwise).
   */
  readonly sleepBlocks: boolean;
}

export type QpState = 'ready' | 'error' | 'closed';

export interface QueuePair {
  /** Random, identifies the QP in completions. */
  readonly qpNum: number;
  readonly pd: ProtectionDomain;
  readonly state: QpState;
  /** What the peer passed as `info` at connect/accept time (e.g. its rank). */
  readonly peerInfo: Readonly<Record<string, unknown>>;
  postSend(wr: SendWr): void;
  postRecv(wr: RecvWr): void;
  /** Closes the connection; pending requests complete with flushed. */
  close(): Promise<void>;
}

export interface ConnectOptions {
  host: string;
  port: number;
  /** Cluster secret; never sent on the wire (HMAC challenge-response). */
  secret: string | Uint8Array;
  pd: ProtectionDomain;
  cq: CompletionQueue;
  /** Receive completions go here (default: cq). */
  recvCq?: CompletionQueue;
  /** JSON-serialisable metadata shown to the peer as `peerInfo`. */
  info?: Record<string, unknown>;
  /** Deadline for the whole connection setup (default 10000). */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** A request unanswered this long completes with `timeout` (default 10000). */
  opTimeoutMs?: number;
}

export type AcceptOptions = Omit<ConnectOptions, 'host' | 'port' | 'secret'>;

export interface ListenOptions {
  /** Default 127.0.0.1. */
  host?: string;
  /** 0 (default) picks a free port; `Listener.port` reports it. */
  port?: number;
  secret: string | Uint8Array;
}

export interface Listener {
  readonly host: string;
  readonly port: number;
  /** Waits for the next authenticated peer and builds its queue pair. */
  accept(options: AcceptOptions): Promise<QueuePair>;
  /** Peers rejected by authentication so far. */
  readonly authFailures: number;
  close(): Promise<void>;
}

/** Responder-side counters: requests refused (they touched no memory) and bad frames. */
export interface DeviceStats {
  rejectedKey: number;
  rejectedAccess: number;
  rejectedBounds: number;
  rejectedInvalid: number;
  malformedFrames: number;
  authFailures: number;
  /** ACK frames sent (cumulative ACKs and refusals): one per asked-for request at most (FLAG_ACKREQ in wire.ts). */
  acksSent: number;
}

export interface Device {
  readonly provider: ProviderName;
  readonly name: string;
  allocPd(): ProtectionDomain;
  createCq(options?: { depth?: number }): CompletionQueue;
  listen(options: ListenOptions): Promise<Listener>;
  connect(options: ConnectOptions): Promise<QueuePair>;
  stats(): DeviceStats;
  close(): Promise<void>;
}

export interface ProviderInfo {
  provider: ProviderName | 'rdma';
  available: boolean;
  /** Why not available, or a short description of the transport. */
  detail: string;
}
