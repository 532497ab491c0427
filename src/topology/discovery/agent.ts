import { createHash, randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import type net from 'node:net';
import { canonicalGraph, normalizeLinks, type Link, type LinkKind, type TopologyGraph } from '../model.js';
import { decodeHello, encodeHello, type Hello, type HostView, type LocalLink } from './protocol.js';
import { usableInterfaces } from './interfaces.js';
import { measureLink, startMeasureServer } from './measure.js';

export interface AgentOptions {
  host: string;
  secret: Buffer;
  /** UDP port for hellos and TCP port for measurements (same number). */
  port?: number;
  /** IPv6 link-local multicast group the hellos go to. */
  group?: string;
  intervalMs?: number;
  /** A neighbour unheard for this long is gone. */
  neighbourExpiryMs?: number;
  /** A host whose view has not advanced for this long is gone. */
  viewExpiryMs?: number;
  /** Hellos older or newer than this (by the sender's clock) are refused as replays. */
  maxClockSkewMs?: number;
  /** Measure latency and bandwidth of each new link (done by the end with the smaller host name). */
  measure?: boolean;
  measureBytes?: number;
  /** What each local interface is (kind, line rate), e.g. from `probeHost()`; links are `ethernet` without it. */
  interfaceInfo?: (iface: string) => { kind?: LinkKind; speedGbps?: number } | undefined;
  /** Restrict to these interfaces. */
  interfaces?: readonly string[];
  /** Called whenever the graph or its measurements change. */
  onChange?: (graph: TopologyGraph) => void;
}

interface Neighbour extends LocalLink {
  address: string;
  lastSeen: number;
  boot: string;
}

interface StoredView extends HostView {
  heardAt: number;
}

/**
 * One discovery agent per host. Every interval it sends an authenticated hello on each usable
 * interface (IPv6 link-local multicast, so no addresses need to be configured first); the
 * arrival interface of a peer's hello says which neighbour sits behind which interface. Hellos
 * also carry every host view the sender knows (link-state flooding), so each agent assembles
 * the whole graph; a cable counts only when both of its ends report it.
 */
export class DiscoveryAgent {
  readonly host: string;
  private readonly secret: Buffer;
  private readonly port: number;
  private readonly group: string;
  private readonly opts: AgentOptions;
  private readonly boot = randomBytes(6).toString('hex');
  private seq = 0;
  private socket: dgram.Socket | undefined;
  private server: net.Server | undefined;
  private timer: NodeJS.Timeout | undefined;
  private readonly joined = new Set<string>();
  private readonly neighbours = new Map<string, Neighbour>();
  private readonly views = new Map<string, StoredView>();
  private readonly figures = new Map<string, { latencyUs: number; bandwidthGBps: number }>();
  private readonly measuring = new Set<string>();
  private measureQueue: Promise<void> = Promise.resolve();
  private lastEmitted = '';
  private graphHash = '';
  private state: string | undefined;
  private readonly echoes = new Map<string, { sentOn: string; heardOn: string; lastSeen: number }>();
  private readonly skews = new Map<string, number>();
  /** Packets refused for a bad MAC, a bad shape or a stale timestamp. */
  rejected = 0;

  constructor(opts: AgentOptions) {
    this.opts = opts;
    this.host = opts.host;
    this.secret = opts.secret;
    this.port = opts.port ?? 47600;
    this.group = opts.group ?? 'ff02::7a6e:6d';
  }

  async start(): Promise<void> {
    const socket = dgram.createSocket({ type: 'udp6', reuseAddr: true });
    this.socket = socket;
    socket.on('message', (msg, rinfo) => this.receive(msg, rinfo.address));
    socket.on('error', () => undefined); // per-packet send errors are handled at the send; nothing else is fatal
    try {
      await new Promise<void>((resolve, reject) => {
        socket.once('error', reject);
        socket.bind(this.port, '::', () => resolve());
      });
      socket.setMulticastLoopback(false);
      this.server = await startMeasureServer(this.port, this.secret, this.host);
    } catch (error) {
      // A bound UDP socket would keep the process alive after the failure is reported.
      await this.stop();
      throw error;
    }
    this.tick();
    this.timer = setInterval(() => this.tick(), this.opts.intervalMs ?? 250);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.socket?.close();
    this.socket = undefined;
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    this.server?.unref();
  }

  /** This host's cables as it sees them now. */
  localLinks(): LocalLink[] {
    return [...this.neighbours.values()]
      .map((n) => {
        const l: LocalLink = { iface: n.iface, peer: n.peer, peerIface: n.peerIface };
        const info = this.opts.interfaceInfo?.(n.iface);
        if (info?.kind !== undefined) l.kind = info.kind;
        if (info?.speedGbps !== undefined) l.speedGbps = info.speedGbps;
        const f = this.figures.get(linkKey(this.host, n.iface, n.peer, n.peerIface));
        return f ? { ...l, ...f } : l;
      })
      .sort((a, b) => (a.iface + a.peer < b.iface + b.peer ? -1 : 1));
  }

  /** The whole graph: live hosts and the cables both ends confirm. */
  graph(): TopologyGraph {
    const views = [this.ownView(), ...this.views.values()];
    const byHost = new Map(views.map((v) => [v.host, v]));
    const links: Link[] = [];
    for (const v of views) {
      for (const l of v.links) {
        const other = byHost.get(l.peer);
        const back = other?.links.find(
          (o) => o.iface === l.peerIface && o.peer === v.host && o.peerIface === l.iface,
        );
        if (!back) continue;
        const link: Link = {
          a: v.host,
          aPort: l.iface,
          b: l.peer,
          bPort: l.peerIface,
          kind: slower(l.kind, back.kind),
        };
        const speed = Math.min(l.speedGbps ?? Infinity, back.speedGbps ?? Infinity);
        if (speed < Infinity) link.speedGbps = speed;
        const lat = l.latencyUs ?? back.latencyUs;
        const bw = l.bandwidthGBps ?? back.bandwidthGBps;
        if (lat !== undefined) link.latencyUs = lat;
        if (bw !== undefined) link.bandwidthGBps = bw;
        links.push(link);
      }
    }
    return { hosts: [...byHost.keys()].sort(), links: normalizeLinks(links) };
  }

  /**
   * Bridge loops seen from here: this host's own hello, sent on one interface, heard on
   * another (or the same one, through a loop beyond it). Forgotten after the neighbour expiry.
   */
  loops(): { sentOn: string; heardOn: string }[] {
    return [...this.echoes.values()]
      .map(({ sentOn, heardOn }) => ({ sentOn, heardOn }))
      .sort((x, y) =>
        x.sentOn === y.sentOn ? (x.heardOn < y.heardOn ? -1 : 1) : x.sentOn < y.sentOn ? -1 : 1,
      );
  }

  /**
   * Clock offset of each neighbour that sent an authenticated hello (its clock minus ours, in
   * ms; transit over a cable is microseconds). Hellos beyond `maxClockSkewMs` are refused as
   * replays, so a large value here explains a neighbour that never appears.
   */
  clockSkews(): Map<string, number> {
    return new Map(this.skews);
  }

  /** True when every live host reports the same graph as this one. */
  agreed(): boolean {
    return [...this.views.values()].every((v) => v.graphHash === this.graphHash);
  }

  /** Sets the phase flooded with this host's view. */
  setState(state: string): void {
    this.state = state;
  }

  /** Each live host's phase as last heard (this host included). */
  states(): Map<string, string | undefined> {
    return new Map([
      [this.host, this.state],
      ...[...this.views.values()].map((v): [string, string | undefined] => [v.host, v.state]),
    ]);
  }

  private ownView(): HostView {
    const v: HostView = {
      host: this.host,
      boot: this.boot,
      seq: this.seq,
      graphHash: this.graphHash,
      links: this.localLinks(),
    };
    return this.state === undefined ? v : { ...v, state: this.state };
  }

  private tick(): void {
    const now = Date.now();
    const ifaces = usableInterfaces(this.opts.interfaces);
    const usable = new Set(ifaces);
    for (const [key, n] of this.neighbours) {
      if (!usable.has(n.iface) || now - n.lastSeen > (this.opts.neighbourExpiryMs ?? 1000))
        this.neighbours.delete(key);
    }
    for (const name of [...this.joined]) if (!usable.has(name)) this.joined.delete(name);
    for (const [host, v] of this.views)
      if (now - v.heardAt > (this.opts.viewExpiryMs ?? 2500)) this.views.delete(host);
    for (const [key, e] of this.echoes)
      if (now - e.lastSeen > (this.opts.neighbourExpiryMs ?? 1000)) this.echoes.delete(key);
    this.seq++;
    this.refresh();
    const socket = this.socket;
    if (!socket) return;
    const views = [this.ownView(), ...[...this.views.values()].map(({ heardAt: _h, ...v }) => v)];
    for (const iface of ifaces) {
      if (!this.joined.has(iface)) {
        try {
          socket.addMembership(this.group, `::%${iface}`);
        } catch (e) {
          // EADDRINUSE: the kernel kept the membership while the link was down. Anything else
          // (no link-local address yet) is tried again next tick.
          if (!/EADDRINUSE/.test(String((e as Error).message) + String((e as { code?: string }).code)))
            continue;
        }
        this.joined.add(iface);
      }
      const hello: Hello = { v: 1, host: this.host, iface, ts: now, views };
      socket.send(encodeHello(this.secret, hello), this.port, `${this.group}%${iface}`, () => undefined);
    }
  }

  private receive(packet: Buffer, from: string): void {
    const hello = decodeHello(this.secret, packet);
    const scope = from.indexOf('%');
    if (!hello || scope < 0) {
      this.rejected++;
      return;
    }
    const skew = hello.ts - Date.now();
    if (hello.host !== this.host) this.skews.set(hello.host, skew);
    if (Math.abs(skew) > (this.opts.maxClockSkewMs ?? 30_000)) {
      this.rejected++;
      return;
    }
    if (hello.host === this.host) {
      // Our own hello came back in: something between our ports forwards frames (a bridge),
      // so those ports form a loop that would turn broadcasts into a storm.
      const iface = from.slice(scope + 1);
      const key = `${hello.iface}>${iface}`;
      const isNew = !this.echoes.has(key);
      this.echoes.set(key, { sentOn: hello.iface, heardOn: iface, lastSeen: Date.now() });
      if (isNew) this.refresh();
      return;
    }
    const iface = from.slice(scope + 1);
    const own = hello.views.find((v) => v.host === hello.host);
    const key = `${iface}|${hello.host}|${hello.iface}`;
    const isNew = !this.neighbours.has(key);
    this.neighbours.set(key, {
      iface,
      peer: hello.host,
      peerIface: hello.iface,
      address: from,
      lastSeen: Date.now(),
      boot: own?.boot ?? '',
    });
    for (const v of hello.views) this.merge(v);
    if (isNew) {
      this.refresh();
      if (this.opts.measure && this.host < hello.host) this.scheduleMeasure(key);
    }
  }

  private merge(v: HostView): void {
    if (v.host === this.host) return;
    const cur = this.views.get(v.host);
    if (cur && cur.boot === v.boot && cur.seq >= v.seq) return;
    this.views.set(v.host, { ...v, heardAt: Date.now() });
    this.refresh();
  }

  private scheduleMeasure(key: string): void {
    if (this.measuring.has(key)) return;
    this.measuring.add(key);
    this.measureQueue = this.measureQueue.then(async () => {
      const n = this.neighbours.get(key);
      try {
        if (!n) return;
        const f = await measureLink(n.address, this.port, this.secret, {
          bytes: this.opts.measureBytes ?? 4 << 20,
        });
        this.figures.set(linkKey(this.host, n.iface, n.peer, n.peerIface), f);
        this.refresh();
      } catch {
        // the link went away mid-measurement; it is measured again when it comes back
      } finally {
        this.measuring.delete(key);
      }
    });
  }

  /** Recomputes the graph hash and tells the listener when anything visible changed. */
  private refresh(): void {
    const g = this.graph();
    this.graphHash = createHash('sha256').update(canonicalGraph(g)).digest('hex').slice(0, 16);
    const text = JSON.stringify(g) + this.agreed() + JSON.stringify(this.loops());
    if (text !== this.lastEmitted) {
      this.lastEmitted = text;
      this.opts.onChange?.(g);
    }
  }
}

/** A cable is only as fast as its slower end: a Thunderbolt 5 port cabled to a Thunderbolt 4 one is a Thunderbolt 4 link. */
function slower(x: LinkKind | undefined, y: LinkKind | undefined): LinkKind {
  if (x === undefined || y === undefined) return x ?? y ?? 'ethernet';
  if (x === y) return x;
  return x === 'tb4' || y === 'tb4' ? 'tb4' : x === 'tb5' ? y : y === 'tb5' ? x : 'ethernet';
}

const linkKey = (host: string, iface: string, peer: string, peerIface: string): string =>
  `${host}:${iface}-${peer}:${peerIface}`;
