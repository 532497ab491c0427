import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import dgram from 'node:dgram';
import { networkInterfaces } from 'node:os';
import { TandemError } from '../errors/index.js';
import { usableInterfaces } from '../topology/index.js';
import { CLUSTER_PORT } from './cluster-port.js';

/*
 * Finding the serving cluster on the local network: a member that knows no address sends an
 * authenticated probe to an IPv6 link-local multicast group on each of its interfaces (no
 * address needs to be configured first, as `tandem topology --discover` does); the coordinator
 * answers it, unicast, with the addresses of its cluster port. Both directions carry
 * HMAC-SHA256(secret) over the body, and the answer echoes the probe's random nonce, so an
 * answer is neither forged without the secret nor replayed to a later probe. A replayed probe
 * only makes the coordinator answer again (the addresses it gives are no secret). The member
 * then dials the address and the control handshake authenticates both ends as ever.
 */

/** UDP port of the probes and answers (the cluster port's default number, over UDP). */
export const DISCOVERY_PORT = CLUSTER_PORT;
/** The multicast group probes go to (beside topology discovery's ff02::7a6e:6d). */
export const DISCOVERY_GROUP = 'ff02::7a6e:6e';
/** Probes whose sender's clock is this far from ours are dropped. */
const MAX_SKEW_MS = 30_000;
const MAC_BYTES = 32;

interface Probe {
  v: 1;
  kind: 'probe';
  nonce: string;
  ts: number;
}

interface Answer {
  v: 1;
  kind: 'answer';
  nonce: string;
  /** The cluster port's addresses, `host:port`, best first. */
  addresses: string[];
}

function seal(secret: string, body: Probe | Answer): Buffer {
  const json = Buffer.from(JSON.stringify(body));
  return Buffer.concat([createHmac('sha256', secret).update('tandem-cluster').update(json).digest(), json]);
}

/** The body of a packet sealed with `secret`, or undefined for anything else (dropped like noise). */
function open(secret: string, packet: Buffer): Record<string, unknown> | undefined {
  if (packet.length <= MAC_BYTES) return undefined;
  const json = packet.subarray(MAC_BYTES);
  const want = createHmac('sha256', secret).update('tandem-cluster').update(json).digest();
  if (!timingSafeEqual(packet.subarray(0, MAC_BYTES), want)) return undefined;
  try {
    const body = JSON.parse(json.toString('utf8')) as unknown;
    return typeof body === 'object' && body !== null ? (body as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

export interface ResponderOptions {
  secret: string;
  /** The cluster port members dial (`HOST:PORT`; a wildcard host is answered with the arrival interface's IPv4 addresses). */
  clusterAddress: string;
  port?: number;
  group?: string;
  log?: (line: string) => void;
}

/** The IPv4 addresses a member that probed on `iface` reaches this host at (loopback for a local probe). */
function addressesFor(iface: string | undefined, from: string, port: number): string[] {
  const all = networkInterfaces();
  const v4 = (name: string): string[] =>
    (all[name] ?? []).filter((a) => a.family === 'IPv4').map((a) => `${a.address}:${port}`);
  if (from === '::1' || from.startsWith('::ffff:127.') || iface === 'lo') return [`127.0.0.1:${port}`];
  if (iface !== undefined && v4(iface).length > 0) return v4(iface);
  return Object.keys(all).flatMap((n) => ((all[n] ?? []).some((a) => a.internal) ? [] : v4(n)));
}

/**
 * The coordinator's side: answers members' probes with its cluster port's addresses. It joins
 * the group on every usable interface, again each second for interfaces that come up later.
 */
export class DiscoveryResponder {
  private timer: NodeJS.Timeout | undefined;
  private readonly joined = new Set<string>();
  /** Packets dropped: not sealed with the secret, malformed, or too far from our clock. */
  refused = 0;

  private constructor(
    private readonly socket: dgram.Socket,
    private readonly o: ResponderOptions,
  ) {}

  static async start(o: ResponderOptions): Promise<DiscoveryResponder> {
    const socket = dgram.createSocket({ type: 'udp6', reuseAddr: false });
    const port = o.port ?? DISCOVERY_PORT;
    await new Promise<void>((resolve, reject) => {
      socket.once('error', (e) => {
        socket.close();
        reject(
          new TandemError('CLUSTER_SPAWN', `cannot answer discovery on UDP port ${port}: ${e.message}`, {
            hint: 'another coordinator answers there: members must then join by address (tandem node --join HOST:PORT)',
          }),
        );
      });
      socket.bind(port, '::', () => resolve());
    });
    socket.on('error', () => undefined); // a failed answer (the member left) is not fatal
    const r = new DiscoveryResponder(socket, o);
    socket.on('message', (packet, rinfo) => r.answer(packet, rinfo.address, rinfo.port));
    r.joinGroups();
    r.timer = setInterval(() => r.joinGroups(), 1000);
    r.timer.unref();
    return r;
  }

  /** The UDP port it answers on (the one asked for, or the one picked for port 0). */
  get port(): number {
    return this.socket.address().port;
  }

  private joinGroups(): void {
    for (const iface of usableInterfaces()) {
      if (this.joined.has(iface)) continue;
      try {
        this.socket.addMembership(this.o.group ?? DISCOVERY_GROUP, `::%${iface}`);
        this.joined.add(iface);
      } catch (e) {
        // EADDRINUSE: already a member; anything else (no link-local address yet) is tried next second
        if (/EADDRINUSE/.test(String((e as Error).message))) this.joined.add(iface);
      }
    }
  }

  private answer(packet: Buffer, from: string, fromPort: number): void {
    const probe = open(this.o.secret, packet);
    if (
      !probe ||
      probe.v !== 1 ||
      probe.kind !== 'probe' ||
      typeof probe.nonce !== 'string' ||
      typeof probe.ts !== 'number' ||
      Math.abs(probe.ts - Date.now()) > MAX_SKEW_MS
    ) {
      this.refused++;
      return;
    }
    const scope = from.indexOf('%');
    const iface = scope >= 0 ? from.slice(scope + 1) : undefined;
    const at = this.o.clusterAddress.lastIndexOf(':');
    const host = this.o.clusterAddress.slice(0, at).replace(/^\[|\]$/g, '');
    const port = Number(this.o.clusterAddress.slice(at + 1));
    const addresses =
      host === '0.0.0.0' || host === '::' || host === ''
        ? addressesFor(iface, from, port)
        : [this.o.clusterAddress];
    const body: Answer = { v: 1, kind: 'answer', nonce: probe.nonce, addresses };
    this.socket.send(seal(this.o.secret, body), fromPort, from, () => undefined);
  }

  close(): Promise<void> {
    clearInterval(this.timer);
    return new Promise((resolve) => this.socket.close(() => resolve()));
  }
}

export interface DiscoverOptions {
  secret: string;
  port?: number;
  group?: string;
  /** Give up after this long (default 5000 ms). */
  timeoutMs?: number;
  /** Probe these addresses too (unicast; tests use `::1`), besides the group on every usable interface. */
  targets?: readonly string[];
  /** Probe the multicast group (default true; tests of `targets` alone turn it off). */
  multicast?: boolean;
}

/**
 * The member's side: probes every 250 ms until a coordinator holding the secret answers, and
 * resolves with its cluster port's addresses (best first). Rejects with CLUSTER_TIMEOUT after
 * `timeoutMs` with no answer.
 */
export async function discoverCluster(o: DiscoverOptions): Promise<string[]> {
  const socket = dgram.createSocket({ type: 'udp6', reuseAddr: false });
  const port = o.port ?? DISCOVERY_PORT;
  const group = o.group ?? DISCOVERY_GROUP;
  const nonce = randomBytes(12).toString('hex');
  const timeoutMs = o.timeoutMs ?? 5000;
  socket.on('error', () => undefined); // a send on an interface without an address yet fails alone
  await new Promise<void>((resolve) => socket.bind(0, '::', () => resolve()));
  let timer: NodeJS.Timeout | undefined;
  let deadline: NodeJS.Timeout | undefined;
  try {
    return await new Promise<string[]>((resolve, reject) => {
      socket.on('message', (packet) => {
        const a = open(o.secret, packet);
        if (
          a?.v === 1 &&
          a.kind === 'answer' &&
          a.nonce === nonce &&
          Array.isArray(a.addresses) &&
          a.addresses.length > 0 &&
          a.addresses.every((x) => typeof x === 'string')
        )
          resolve(a.addresses as string[]);
      });
      const probe = (): void => {
        const packet = seal(o.secret, { v: 1, kind: 'probe', nonce, ts: Date.now() });
        for (const iface of o.multicast === false ? [] : usableInterfaces())
          socket.send(packet, port, `${group}%${iface}`, () => undefined);
        for (const t of o.targets ?? []) socket.send(packet, port, t, () => undefined);
      };
      probe();
      timer = setInterval(probe, 250);
      deadline = setTimeout(
        () =>
          reject(
            new TandemError(
              'CLUSTER_TIMEOUT',
              `no coordinator answered discovery on UDP port ${port} within ${timeoutMs} ms`,
              {
                hint: 'start `tandem serve MODEL --cluster HOST:PORT` on this network with the same cluster secret, or join by address (tandem node --join HOST:PORT)',
              },
            ),
          ),
        timeoutMs,
      );
    });
  } finally {
    clearInterval(timer);
    clearTimeout(deadline);
    socket.close();
  }
}
