import { createHmac, timingSafeEqual } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { TandemError } from '../errors/index.js';
import { CQ, type ProgressEngine } from './completion-queue.js';
import { Domain, KeyTable, type Allocator } from './memory.js';
import { Qp, type QpOptions } from './queue-pair.js';
import type {
  AcceptOptions,
  CompletionQueue,
  ConnectOptions,
  Device,
  DeviceStats,
  Listener,
  ListenOptions,
  ProtectionDomain,
  ProviderName,
  QueuePair,
} from './types.js';

const TIMEOUT_CHECK_MS = 100;
export const DEFAULT_OP_TIMEOUT_MS = 10_000;
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

/** What every provider shares: keys, domains, completion queues, queue-pair bookkeeping, progress. */
export abstract class DeviceBase implements Device {
  abstract readonly provider: ProviderName;
  abstract readonly name: string;
  readonly keys = new KeyTable();
  protected readonly counters: DeviceStats = {
    rejectedKey: 0,
    rejectedAccess: 0,
    rejectedBounds: 0,
    rejectedInvalid: 0,
    malformedFrames: 0,
    authFailures: 0,
    acksSent: 0,
  };
  private readonly qps = new Set<Qp>();
  /** Listeners still open; closed with the device. */
  private readonly listeners = new Set<Listener>();
  private pollable: Qp[] = [];
  private timer: NodeJS.Timeout | undefined;
  protected closed = false;
  protected allocator: Allocator = (length) => ({ buffer: new Uint8Array(length), release: () => {} });

  readonly engine: ProgressEngine;

  /** Set by providers with a doorbell (shm): see ProgressEngine.active / arm. */
  protected doorbell: { active(): void; arm(): boolean } | undefined;

  constructor() {
    const pollable = (): Qp[] => this.pollable;
    const sleep = (ms: number): void => this.sleep(ms);
    const bell = (): { active(): void; arm(): boolean } | undefined => this.doorbell;
    this.engine = {
      progress(): boolean {
        const list = pollable();
        let any = false;
        for (let i = 0; i < list.length; i++) if ((list[i] as Qp).poll()) any = true;
        return any;
      },
      get spins(): boolean {
        return pollable().length > 0;
      },
      active(): void {
        bell()?.active();
      },
      get arm(): (() => boolean) | undefined {
        const b = bell();
        return b === undefined ? undefined : () => b.arm();
      },
      sleepers: new Set<CQ>(),
      sleep,
    };
  }

  /** Blocks at most `ms` until a peer's data arrives (tcp poll(2)); default: no sleep. */
  protected sleep(_ms: number): void {}

  allocPd(): ProtectionDomain {
    this.checkOpen();
    return new Domain(this, this.keys, this.allocator);
  }

  createCq(options: { depth?: number } = {}): CompletionQueue {
    this.checkOpen();
    return new CQ(this.engine, options.depth ?? 65536);
  }

  abstract listen(options: ListenOptions): Promise<Listener>;

  /** Providers pass every listener they create through here. */
  protected track(l: Listener): Listener {
    this.listeners.add(l);
    const close = l.close.bind(l);
    l.close = async () => {
      this.listeners.delete(l);
      await close();
    };
    return l;
  }
  abstract connect(options: ConnectOptions): Promise<QueuePair>;

  stats(): DeviceStats {
    return { ...this.counters };
  }

  protected countAuthFailure(): void {
    this.counters.authFailures++;
  }

  /** Builds a queue pair on a ready transport and tracks it for timeouts and polling. */
  protected makeQp(
    o: Omit<QpOptions, 'stats' | 'onClosed' | 'pd' | 'cq' | 'recvCq' | 'opTimeoutMs'>,
    opts: AcceptOptions,
    pollable: boolean,
  ): Qp {
    const qp = new Qp({
      ...o,
      pd: checkPd(opts.pd, this),
      cq: opts.cq as CQ,
      recvCq: (opts.recvCq ?? opts.cq) as CQ,
      stats: this.counters,
      opTimeoutMs: opts.opTimeoutMs ?? DEFAULT_OP_TIMEOUT_MS,
      onClosed: (q) => {
        this.qps.delete(q);
        this.pollable = this.pollable.filter((p) => p !== q);
      },
    });
    this.qps.add(qp);
    if (pollable) this.pollable = [...this.pollable, qp];
    if (this.timer === undefined) {
      this.timer = setInterval(() => {
        const now = performance.now();
        for (const q of this.qps) q.checkTimeout(now);
      }, TIMEOUT_CHECK_MS);
      this.timer.unref();
    }
    return qp;
  }

  protected checkOpen(): void {
    if (this.closed) {
      throw new TandemError('FABRIC_CLOSED', `${this.provider} device is closed`, {
        hint: 'open a new device with openDevice()',
      });
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const l of [...this.listeners]) await l.close();
    for (const qp of [...this.qps]) await qp.close();
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

function checkPd(pd: ProtectionDomain, device: Device): Domain {
  if (!(pd instanceof Domain) || pd.device !== device) {
    throw new TandemError('FABRIC_INVALID_REQUEST', 'the protection domain belongs to another device', {
      hint: 'allocate the PD with allocPd() on the device that makes the connection',
    });
  }
  return pd;
}

export function secretBytes(secret: string | Uint8Array): Buffer {
  const b = typeof secret === 'string' ? Buffer.from(secret, 'utf8') : Buffer.from(secret);
  if (b.length === 0) {
    throw new TandemError('INVALID_ARGUMENT', 'the cluster secret is empty', {
      hint: 'pass the same non-empty cluster secret to every rank (e.g. --secret-file or TANDEM_SECRET)',
    });
  }
  return b;
}

/** HMAC-SHA256 proof of the secret over a role label and both nonces. */
export function proof(secret: Buffer, role: string, a: Uint8Array, b: Uint8Array): Buffer {
  return createHmac('sha256', secret).update(role).update(a).update(b).digest();
}

export function sameProof(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Rejects when `ms` pass or `signal` aborts first. */
export function withDeadline<T>(
  work: Promise<T>,
  ms: number,
  signal: AbortSignal | undefined,
  what: string,
  onGiveUp?: () => void,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const fail = (e: TandemError): void => {
      cleanup();
      onGiveUp?.();
      reject(e);
    };
    const timer = setTimeout(
      () =>
        fail(
          new TandemError('FABRIC_WAIT_TIMEOUT', `${what} did not finish within ${ms} ms`, {
            hint: 'check that the peer is running and reachable, or raise the timeout',
          }),
        ),
      ms,
    );
    const onAbort = (): void =>
      fail(new TandemError('ABORTED', `${what} aborted`, { hint: 'the caller aborted the operation' }));
    const cleanup = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    };
    // the work's outcome is always handled, also when the signal had aborted before the call
    work.then(
      (v) => {
        cleanup();
        resolve(v);
      },
      (e: unknown) => {
        cleanup();
        reject(e);
      },
    );
    if (signal?.aborted) return onAbort();
    signal?.addEventListener('abort', onAbort);
  });
}
