import { TandemError } from '../../errors/index.js';
import {
  Access,
  openDevice,
  type CompletionQueue,
  type Device,
  type Listener,
  type MemoryRegion,
  type ProviderName,
  type QueuePair,
  type RemoteRegion,
} from '../../fabric/index.js';
import type { Communicator } from '../communicator.js';

/** Elements per exchange; longer vectors (prefill: [tokens, width]) go in several. */
export const DEFAULT_CHUNK = 1 << 19;

/**
 * Whether groups on this provider get the direct exchange: over shm only. Over tcp the
 * communicator decoded faster, and prefill the other way round (docs/parallel.md).
 */
export function usesDirectExchange(provider: ProviderName): boolean {
  return provider === 'shm';
}

/** One exchange slot: the largest payload plus 64 bytes (room for the profiling timestamp, see TANDEM_TP_PROFILE). */
export function exchangeSlotBytes(chunk: number): number {
  return Math.ceil((4 * chunk) / 64) * 64 + 64;
}

/** Bytes an exchange registers on each member of a group of `size`: two outbox slots and two inbox slots per peer. */
export function exchangeBufferBytes(size: number, chunk = DEFAULT_CHUNK): number {
  return size > 1 ? 2 * size * exchangeSlotBytes(chunk) : 0;
}

/** Receives posted per peer: a write with immediate consumes one, and the exchange posts it again at once. */
const RECVS_PER_PEER = 4;

/** One peer of a direct exchange: its connection, its inbox here, and this rank's inbox on it. */
export interface ExchangePeer {
  rank: number;
  qp: QueuePair;
  /** This rank's inbox on the peer: two slots (slots.ts), written only by this rank. */
  remote: RemoteRegion;
  /** The peer's inbox here. */
  inbox: MemoryRegion;
}

/** What a direct exchange holds: its own device, listener, completion queue, outbox and a connection per peer. */
export interface ExchangeLinks {
  device: Device;
  listener: Listener;
  cq: CompletionQueue;
  /** This rank's staged parts, one slot per parity. */
  outbox: MemoryRegion;
  peers: (ExchangePeer | undefined)[];
}

export interface ExchangeConnectOptions {
  group: Communicator;
  provider: ProviderName;
  host: string;
  secret: string;
  timeoutMs: number;
  /** Bytes of one slot; inboxes and the outbox hold two. */
  slotBytes: number;
}

/** Encodes an IPv4/hostname string as ints for a gather (hosts are short). */
const HOST_WORDS = 64;
function hostWords(host: string): Int32Array {
  const out = new Int32Array(HOST_WORDS);
  const bytes = Buffer.from(host, 'utf8');
  if (bytes.length >= HOST_WORDS)
    throw new TandemError('PAR_EXCHANGE', `fabric host '${host}' is longer than ${HOST_WORDS - 1} bytes`, {
      hint: 'use an IP address for the node',
    });
  for (let i = 0; i < bytes.length; i++) out[i] = bytes[i] as number;
  return out;
}
function wordsHost(words: Int32Array): string {
  const bytes: number[] = [];
  for (const w of words) {
    if (w === 0) break;
    bytes.push(w);
  }
  return Buffer.from(bytes).toString('utf8');
}

/** The peer a connection introduces in its info, checked (a peer of another version or run is refused). */
function peerOf(
  qp: QueuePair,
  o: ExchangeConnectOptions,
  peers: (ExchangePeer | undefined)[],
  inbox: MemoryRegion,
): ExchangePeer {
  const { group } = o;
  const peer = qp.peerInfo.rank;
  const r = qp.peerInfo.region as { addr?: unknown; rkey?: unknown; length?: unknown } | undefined;
  if (
    typeof peer !== 'number' ||
    !Number.isInteger(peer) ||
    peer < 0 ||
    peer >= group.size ||
    peer === group.rank ||
    peers[peer] !== undefined ||
    typeof r?.addr !== 'string' ||
    !/^\d+$/.test(r.addr) ||
    typeof r.rkey !== 'number' ||
    typeof r.length !== 'number' ||
    r.length < 2 * o.slotBytes
  )
    throw new TandemError(
      'PAR_EXCHANGE',
      `rank ${group.rank}: a peer introduced itself as rank ${String(peer)} with an unusable inbox`,
      {
        hint: 'run the same tandem version on every node (and one run per set of nodes)',
      },
    );
  return { rank: peer, qp, remote: { addr: BigInt(r.addr), rkey: r.rkey, length: r.length }, inbox };
}

/**
 * Collective over `group`: every member opens its own device, listens, learns the others'
 * addresses (a gather over the group) and connects to each: lower ranks are dialled, higher
 * ones accepted. Each connection's info describes the inbox this rank registered for that peer.
 */
export async function connectExchange(o: ExchangeConnectOptions): Promise<ExchangeLinks> {
  const { group, timeoutMs, slotBytes } = o;
  const device = await openDevice(o.provider);
  let listener: Listener | undefined;
  const qps: QueuePair[] = [];
  try {
    listener = await device.listen({ host: o.host, port: 0, secret: o.secret });
    const mine = new Int32Array(HOST_WORDS + 1);
    mine.set(hostWords(o.host));
    mine[HOST_WORDS] = listener.port;
    const all = (await group.allGather(mine)) as Int32Array;
    const pd = device.allocPd();
    const cq = device.createCq({ depth: 4096 });
    const outbox = pd.allocate(2 * slotBytes, Access.LOCAL_WRITE);
    const peers: (ExchangePeer | undefined)[] = Array.from({ length: group.size });
    const adopt = (qp: QueuePair, inbox: MemoryRegion): void => {
      qps.push(qp);
      const peer = peerOf(qp, o, peers, inbox);
      peers[peer.rank] = peer;
      for (let i = 0; i < RECVS_PER_PEER; i++) qp.postRecv({ wrId: peer.rank, sgl: [] });
    };
    const work: Promise<void>[] = [];
    for (let p = 0; p < group.size; p++) {
      if (p === group.rank) continue;
      // One inbox per connection, described to the peer in the connection's info.
      const inbox = pd.allocate(2 * slotBytes, Access.LOCAL_WRITE | Access.REMOTE_WRITE);
      const info = {
        rank: group.rank,
        region: { addr: String(inbox.addr), rkey: inbox.rkey, length: inbox.length },
      };
      const qp =
        p < group.rank
          ? device.connect({
              ...dialled(all, p),
              secret: o.secret,
              pd,
              cq,
              info,
              timeoutMs,
              opTimeoutMs: timeoutMs,
            })
          : // Higher ranks connect to us, in any order; their info says who they are.
            listener.accept({ pd, cq, info, timeoutMs, opTimeoutMs: timeoutMs });
      work.push(qp.then((q) => adopt(q, inbox)));
    }
    await Promise.all(work);
    return { device, listener, cq, outbox, peers };
  } catch (e) {
    for (const qp of qps) await qp.close().catch(() => undefined);
    await listener?.close().catch(() => undefined);
    await device.close().catch(() => undefined);
    throw e;
  }
}

/** Where rank `p` listens, from the gathered table. */
function dialled(all: Int32Array, p: number): { host: string; port: number } {
  const at = all.subarray(p * (HOST_WORDS + 1), (p + 1) * (HOST_WORDS + 1));
  return { host: wordsHost(at.subarray(0, HOST_WORDS)), port: at[HOST_WORDS] as number };
}
