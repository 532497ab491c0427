import { TandemError, isTandemError } from '../errors/index.js';
import {
  Access,
  type CompletionQueue,
  type Device,
  type Listener,
  type ProtectionDomain,
  type QueuePair,
} from '../fabric/index.js';
import type { LinkSpec } from './router/index.js';

/**
 * Who is where. `hosts`: every rank listens at addresses[rank] (host:port) and the links of
 * the graph are made directly. `root`: rank `rank` (default 0) listens at `address` and acts
 * as the rendezvous server: every other rank listens on a free port of `host`, tells the root
 * where, and gets the whole table back; the connection to the root stays open as a link, so
 * the root must reach every rank directly (pick one linked to all when the graph is partial).
 */
export type Rendezvous =
  | { kind: 'hosts'; addresses: readonly string[] }
  | { kind: 'root'; address: string; host?: string; rank?: number };

export interface ConnectWorldOptions {
  rank: number;
  size: number;
  device: Device;
  pd: ProtectionDomain;
  cq: CompletionQueue;
  rendezvous: Rendezvous;
  /** Sorted neighbour lists of the world graph. */
  adj: readonly number[][];
  secret: string;
  timeoutMs: number;
  /** Connections ("wires") per linked pair, for striping; default 1. */
  wires?: number;
  /** A listener already open for this rank (e.g. rank 0 on port 0 in tests). */
  listener?: Listener;
  onListening?: (address: string) => void;
  signal?: AbortSignal;
}

export function parseAddress(text: string): { host: string; port: number } {
  const at = text.lastIndexOf(':');
  const port = Number(text.slice(at + 1));
  if (at <= 0 || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new TandemError('COLL_BAD_ARGUMENT', `rendezvous address '${text}' is not host:port`, {
      hint: 'write addresses as host:port, e.g. 127.0.0.1:7000',
    });
  }
  return { host: text.slice(0, at), port };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * How long a peer whose network or host is unreachable (no route: a cable out, an interface
 * down) is tried again before the rank gives up on that link. A refused connection is tried
 * until the deadline instead: the peer is reachable and may not be listening yet.
 */
export const UNREACHABLE_RETRY_MS = 2000;
const UNREACHABLE = new Set(['ENETUNREACH', 'EHOSTUNREACH', 'ENETDOWN', 'EHOSTDOWN']);

/**
 * Connects to a rank that may not be listening yet: retries refused connections until the
 * deadline, unreachable ones for UNREACHABLE_RETRY_MS. The error names the pair (`rank`,
 * `peer`) and whether the peer was `unreachable` (no route to it: the link between the two is
 * missing, which a coordinator can route around).
 */
async function connectRetry(
  o: ConnectWorldOptions,
  address: string,
  deadline: number,
  peer: number,
  extra: Record<string, unknown> = {},
): Promise<QueuePair> {
  const { host, port } = parseAddress(address);
  const started = Date.now();
  for (;;) {
    const left = deadline - Date.now();
    try {
      const info = { ...extra, rank: o.rank, size: o.size };
      return await o.device.connect({
        host,
        port,
        secret: o.secret,
        pd: o.pd,
        cq: o.cq,
        info,
        timeoutMs: Math.max(1, left),
        ...(o.signal ? { signal: o.signal } : {}),
      });
    } catch (e) {
      const unreachable =
        isTandemError(e, 'FABRIC_CONNECT_FAILED') && UNREACHABLE.has(String(e.details.errno));
      if (
        !isTandemError(e, 'FABRIC_CONNECT_FAILED') ||
        Date.now() + 50 >= deadline ||
        (unreachable && Date.now() - started >= UNREACHABLE_RETRY_MS)
      )
        throw rendezvousError(o, `could not connect to rank ${peer} at ${address}`, e, {
          peer,
          unreachable,
        });
      await sleep(50);
    }
  }
}

function rendezvousError(
  o: ConnectWorldOptions,
  what: string,
  cause: unknown,
  details: Record<string, unknown> = {},
): TandemError {
  return new TandemError(
    'COLL_RENDEZVOUS',
    `rank ${o.rank} of ${o.size}: ${what}: ${(cause as Error)?.message ?? String(cause)}`,
    {
      hint: 'start every rank with the same size, rendezvous and secret, and check that the addresses are reachable',
      details: { ...details, rank: o.rank },
      cause,
    },
  );
}

/**
 * The pair [rank, peer] that a failed world setup could not link because no route led from
 * one to the other (connectRetry's `unreachable`), in the ranks of that world; else undefined.
 */
export function unreachablePair(error: unknown): [number, number] | undefined {
  if (!isTandemError(error, 'COLL_RENDEZVOUS') || error.details.unreachable !== true) return undefined;
  const { rank, peer } = error.details;
  return typeof rank === 'number' && typeof peer === 'number' && rank !== peer ? [rank, peer] : undefined;
}

/** Accepts the expected peers, each identified by the `rank:wire` it sends as info. */
async function acceptPeers(
  o: ConnectWorldOptions,
  listener: Listener,
  expected: ReadonlySet<string>,
  deadline: number,
): Promise<Map<string, QueuePair>> {
  const got = new Map<string, QueuePair>();
  while (got.size < expected.size) {
    let qp: QueuePair;
    try {
      qp = await listener.accept({
        pd: o.pd,
        cq: o.cq,
        info: { rank: o.rank, size: o.size },
        timeoutMs: Math.max(1, deadline - Date.now()),
        ...(o.signal ? { signal: o.signal } : {}),
      });
    } catch (e) {
      const missing = [...expected].filter((k) => !got.has(k)).map((k) => k.split(':')[0]);
      throw rendezvousError(
        o,
        `ranks ${[...new Set(missing)].join(', ')} did not connect within the deadline`,
        e,
      );
    }
    const key = `${String(qp.peerInfo.rank)}:${String(qp.peerInfo.wire ?? 0)}`;
    if (!expected.has(key) || got.has(key) || qp.peerInfo.size !== o.size) {
      await qp.close().catch(() => undefined);
      throw rendezvousError(
        o,
        `unexpected peer (rank:wire ${key}, size ${String(qp.peerInfo.size)})`,
        new Error('rank or size mismatch'),
      );
    }
    got.set(key, qp);
  }
  return got;
}

/** Sends or receives one small JSON message on a fresh queue pair (before the router owns it). */
async function exchangeTable(
  o: ConnectWorldOptions,
  qps: QueuePair[],
  table: string[] | undefined,
  deadline: number,
): Promise<string[]> {
  const mr = o.pd.allocate(64 * 1024, Access.LOCAL_WRITE);
  try {
    if (table) {
      const bytes = new TextEncoder().encode(JSON.stringify(table));
      if (bytes.byteLength > mr.length)
        throw rendezvousError(o, 'address table too large', new Error(`${bytes.byteLength} bytes`));
      mr.buffer.set(bytes, 0);
      qps.forEach((qp, i) => qp.postSend({ wrId: i, opcode: 'send', sgl: [mr.sge(0, bytes.byteLength)] }));
      let done = 0;
      while (done < qps.length) {
        for (const wc of await o.cq.wait({ timeoutMs: Math.max(1, deadline - Date.now()) })) {
          if (wc.status !== 'success')
            throw rendezvousError(o, 'sending the address table failed', new Error(wc.status));
          done++;
        }
      }
      return table;
    }
    const qp = qps[0] as QueuePair;
    qp.postRecv({ wrId: 0, sgl: [mr.sge(0, mr.length)] });
    const [wc] = await o.cq.wait({ timeoutMs: Math.max(1, deadline - Date.now()), max: 1 });
    if (wc === undefined || wc.status !== 'success')
      throw rendezvousError(o, 'receiving the address table failed', new Error(wc?.status ?? 'none'));
    const parsed = JSON.parse(new TextDecoder().decode(mr.buffer.subarray(0, wc.byteLen))) as unknown;
    if (!Array.isArray(parsed) || parsed.length !== o.size || !parsed.every((a) => typeof a === 'string')) {
      throw rendezvousError(o, 'the rendezvous root sent a malformed address table', new Error('bad table'));
    }
    return parsed as string[];
  } catch (e) {
    throw isTandemError(e) ? e : rendezvousError(o, 'address table exchange failed', e);
  } finally {
    mr.deregister();
  }
}

/**
 * Builds one queue pair per graph edge (the higher rank connects to the lower one), plus
 * the root's rendezvous connections in `root` mode. Returns the links of this rank.
 */
export async function connectWorld(o: ConnectWorldOptions): Promise<LinkSpec[]> {
  const deadline = Date.now() + o.timeoutMs;
  const wires = Math.max(1, Math.floor(o.wires ?? 1));
  const neighbours = o.adj[o.rank] ?? [];
  const lower = neighbours.filter((r) => r < o.rank);
  const higher = neighbours.filter((r) => r > o.rank);
  const links = new Map<string, QueuePair>();
  let listener = o.listener;
  let table: string[];
  try {
    if (o.rendezvous.kind === 'hosts') {
      table = [...o.rendezvous.addresses];
      if (table.length !== o.size)
        throw rendezvousError(o, `${table.length} addresses given for ${o.size} ranks`, new Error('size'));
      if (listener === undefined && higher.length > 0) {
        const { host, port } = parseAddress(table[o.rank] as string);
        listener = await o.device.listen({ host, port, secret: o.secret });
      }
    } else {
      const root = parseAddress(o.rendezvous.address);
      const rootRank = o.rendezvous.rank ?? 0;
      if (o.rank === rootRank) {
        listener ??= await o.device.listen({ host: root.host, port: root.port, secret: o.secret });
        o.onListening?.(`${listener.host}:${listener.port}`);
        const others = Array.from({ length: o.size }, (_, r) => r).filter((r) => r !== rootRank);
        const all = new Set(others.map((r) => `${r}:0`));
        for (const [key, qp] of await acceptPeers(o, listener, all, deadline)) links.set(key, qp);
        const at = (r: number): string =>
          `${String(links.get(`${r}:0`)?.peerInfo.host)}:${String(links.get(`${r}:0`)?.peerInfo.port)}`;
        table = Array.from({ length: o.size }, (_, r) =>
          r === rootRank ? `${listener?.host}:${listener?.port}` : at(r),
        );
        await exchangeTable(o, [...links.values()], table, deadline);
      } else {
        if (higher.length > 0)
          listener ??= await o.device.listen({
            host: o.rendezvous.host ?? root.host,
            port: 0,
            secret: o.secret,
          });
        const me = { host: listener?.host ?? '', port: listener?.port ?? 0 };
        const qp = await connectRetry(o, o.rendezvous.address, deadline, rootRank, me);
        links.set(`${rootRank}:0`, qp);
        table = await exchangeTable(o, [qp], undefined, deadline);
      }
    }
    const accepting = new Set<string>();
    for (const r of higher)
      for (let w = 0; w < wires; w++) if (!links.has(`${r}:${w}`)) accepting.add(`${r}:${w}`);
    const dialing: [number, number][] = [];
    for (const r of lower) for (let w = 0; w < wires; w++) if (!links.has(`${r}:${w}`)) dialing.push([r, w]);
    const [accepted, connected] = await Promise.all([
      accepting.size > 0 && listener
        ? acceptPeers(o, listener, accepting, deadline)
        : Promise.resolve(new Map<string, QueuePair>()),
      Promise.all(
        dialing.map(
          async ([r, w]) =>
            [`${r}:${w}`, await connectRetry(o, table[r] as string, deadline, r, { wire: w })] as const,
        ),
      ),
    ]);
    for (const [k, qp] of accepted) links.set(k, qp);
    for (const [k, qp] of connected) links.set(k, qp);
  } catch (e) {
    await Promise.all([...links.values()].map((qp) => qp.close().catch(() => undefined)));
    throw e;
  } finally {
    if (listener && listener !== o.listener) await listener.close().catch(() => undefined);
  }
  return [...links.entries()]
    .map(([key, qp]) => {
      const [peer, wire] = key.split(':').map(Number) as [number, number];
      return { peer, wire, qp };
    })
    .sort((a, b) => a.peer - b.peer || a.wire - b.wire);
}
