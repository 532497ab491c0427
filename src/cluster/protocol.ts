import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { TandemError, errorCodes, type ErrorCode } from '../errors/index.js';
import { MalformedMessage, PROTOCOL_VERSION } from './control-messages.js';
import { parseFigures, type NodeFigures } from './node-figures.js';
import { DEFAULT_SILENCE_MS, silenceLimitMs } from './cluster-limits.js';

/**
 * The control channel between a coordinator and a node: newline-delimited JSON over TCP,
 * opened by a mutual challenge-response on the cluster secret (HMAC-SHA256), so nothing is
 * accepted from a peer that does not hold the secret. Requests carry an id; replies echo it;
 * events (no id) stream progress such as generated tokens.
 */
export type Message = Record<string, unknown>;

/** A node sends a heartbeat event this often once authenticated. */
export const HEARTBEAT_MS = 1000;

/**
 * A peer from which nothing (heartbeat, reply or event) came for this long is dead, by
 * default (silenceLimitMs() in cluster-limits.ts: TANDEM_CLUSTER_SILENCE_MS overrides it).
 */
export const DEAD_AFTER_MS = DEFAULT_SILENCE_MS;

/**
 * Calls `onSilent` once nothing came from the peer (`lastSeen()`, Date.now() ms) for
 * `deadAfterMs`, and `beat` every HEARTBEAT_MS so the peer can tell the same of us. A tick
 * that comes late (this process was blocked, e.g. in a long kernel call) does not judge: the
 * peer's messages may be waiting unread behind it.
 */
export function watchSilence(
  lastSeen: () => number,
  deadAfterMs: number,
  onSilent: () => void,
  beat: () => void,
): NodeJS.Timeout {
  const tickMs = Math.min(250, deadAfterMs / 4);
  let lastTick = Date.now();
  let lastBeat = 0;
  const timer = setInterval(() => {
    const now = Date.now();
    const late = now - lastTick > 2 * tickMs;
    lastTick = now;
    if (now - lastBeat >= HEARTBEAT_MS) {
      lastBeat = now;
      beat();
    }
    if (!late && now - lastSeen() > deadAfterMs) {
      clearInterval(timer);
      onSilent();
    }
  }, tickMs);
  timer.unref();
  return timer;
}

/**
 * Requests during which a node's event loop keeps turning (a serving step awaits its
 * collectives layer by layer), so its heartbeats keep coming. Others (a load reading weights, a
 * speed probe, a whole generation on one node) may hold its thread for seconds: silence
 * during them is not judged, and their own deadlines bound them.
 */
const RESPONSIVE = new Set(['hello', 'forward', 'forward-batch', 'release', 'unload']);

/** Requests a node answers at once, without work: their round trips time the control link. */
const QUICK = new Set(['hello', 'release']);

/** A node's heartbeat as the coordinator received it: its figures (if it holds a shard) and the control link's byte counts then. */
export interface HeartbeatSample {
  atMs: number;
  figures: NodeFigures | undefined;
  controlSent: number;
  controlReceived: number;
}

/** Largest control line accepted (a plan for many ranks fits easily). */
const MAX_LINE = 16 * 1024 * 1024;

export function mac(secret: string, role: string, nonce: string): string {
  return createHmac('sha256', secret).update(`tandem-control/${role}/${nonce}`).digest('hex');
}

export function sameMac(a: unknown, b: string): boolean {
  if (typeof a !== 'string' || a.length !== b.length) return false;
  return timingSafeEqual(Buffer.from(a), Buffer.from(b));
}

export function nonce(): string {
  return randomBytes(16).toString('hex');
}

/** Splits a socket's bytes into JSON messages; a malformed or oversized line ends the connection. */
export function readMessages(
  socket: Socket,
  onMessage: (m: Message) => void,
  onBad: (why: string) => void,
): void {
  let buffered = '';
  let refused = false;
  const refuse = (why: string): void => {
    refused = true;
    onBad(why);
  };
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    // lines end in this chunk: only it is searched, so a long line costs its length once
    let start = 0;
    let nl: number;
    while (!refused && (nl = chunk.indexOf('\n', start)) >= 0) {
      const line = buffered + chunk.slice(start, nl);
      buffered = '';
      start = nl + 1;
      if (line.length > MAX_LINE) return refuse(`a control message exceeds ${MAX_LINE} bytes`);
      let parsed: unknown;
      try {
        parsed = JSON.parse(line);
      } catch {
        return refuse('a control message is not JSON');
      }
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
        return refuse('a control message is not a JSON object');
      onMessage(parsed as Message);
    }
    if (refused) return;
    buffered += chunk.slice(start);
    if (buffered.length > MAX_LINE) refuse(`a control message exceeds ${MAX_LINE} bytes`);
  });
}

export function send(socket: Socket, m: Message): void {
  if (!socket.destroyed) socket.write(JSON.stringify(m) + '\n');
}

/** A TandemError as plain JSON for the wire. */
export function errorToJson(e: unknown): Message {
  if (e instanceof TandemError) return { code: e.code, message: e.message, hint: e.hint, details: e.details };
  return {
    code: 'CLUSTER_NODE_FAILED',
    message: e instanceof Error ? e.message : String(e),
    hint: "see the node's log",
    details: {},
  };
}

/** Rebuilds a node's error on the coordinator, prefixed with where it happened. */
export function errorFromJson(j: unknown, where: string, address?: string): TandemError {
  const o = (typeof j === 'object' && j !== null ? j : {}) as Record<string, unknown>;
  const code =
    typeof o.code === 'string' && o.code in errorCodes ? (o.code as ErrorCode) : 'CLUSTER_NODE_FAILED';
  const details =
    typeof o.details === 'object' && o.details !== null ? (o.details as Record<string, unknown>) : {};
  return new TandemError(
    code,
    `${where}${address ? ` (${address})` : ''}: ${String(o.message ?? 'failed')}`,
    {
      hint: String(o.hint ?? "see the node's log"),
      details: { ...details, node: where, ...(address ? { address } : {}) },
    },
  );
}

export function parseHostPort(text: string, what: string): { host: string; port: number } {
  const at = text.lastIndexOf(':');
  const port = Number(text.slice(at + 1));
  if (at <= 0 || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new TandemError('CLI_USAGE', `${what} '${text}' is not host:port`, {
      hint: 'write it as host:port, e.g. 127.0.0.1:7100',
    });
  }
  return { host: text.slice(0, at).replace(/^\[(.*)\]$/, '$1'), port };
}

interface Pending {
  resolve: (v: Message) => void;
  reject: (e: unknown) => void;
  timer: NodeJS.Timeout;
}

/** The session a node serves now: its coordinator's address and when it began (ms since the epoch). */
export interface BusyWith {
  from: string;
  since: number;
}

/** A node's notice, on connecting, that it serves another coordinator's session first. */
export interface NodeBusy extends BusyWith {
  label: string;
  address: string;
}

/** "node 1 at host:port serves another coordinator (from, since ISO time)": what a busy node said. */
function servesAnother(b: NodeBusy): string {
  return `${b.label} at ${b.address} serves another coordinator (${b.from}, since ${new Date(b.since).toISOString()})`;
}

/** How a command says that it waits for a busy node (`onBusy`). */
export function busyLine(b: NodeBusy, timeoutMs: number): string {
  return `${servesAnother(b)}; waiting up to ${Math.round(timeoutMs / 1000)} s for it to end`;
}

/** The coordinator's end of one node's control channel. */
export class ControlClient {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private lost: TandemError | undefined;
  /** When the last message of any kind came from the node (Date.now()). */
  private lastSeen = Date.now();
  /** Requests outstanding that may hold the node's thread for long (see RESPONSIVE). */
  private holding = 0;
  private readonly watchdog: NodeJS.Timeout;
  /** The latest heartbeat and the one before it (rates are their difference). */
  heartbeat: HeartbeatSample | undefined;
  previousHeartbeat: HeartbeatSample | undefined;
  /** The best round trip of a quick request (QUICK) on the control link, ms. */
  bestRttMs: number | undefined;
  /** Events from the node (tokens, listening addresses); heartbeats are not passed on. */
  onEvent: (m: Message) => void = () => {};
  /** Called once, when the node is found lost (connection closed or failed, or silent for deadAfterMs). */
  onLost: (e: TandemError) => void = () => {};

  private constructor(
    private readonly socket: Socket,
    readonly address: string,
    readonly label: string,
    readonly info: Message,
    deadAfterMs: number,
    private readonly secret: string,
  ) {
    socket.on('close', () => this.fail(this.lostError('closed its control connection')));
    socket.on('error', (e) => this.fail(this.lostError(`control connection error: ${e.message}`)));
    this.watchdog = watchSilence(
      // a node busy with a request that may hold its thread is judged by that request's deadline
      () => (this.holding > 0 ? Date.now() : this.lastSeen),
      deadAfterMs,
      () => {
        this.fail(this.lostError(`sent no heartbeat for ${deadAfterMs} ms (stopped, stuck or cut off)`));
        socket.destroy();
      },
      () => send(socket, { type: 'heartbeat' }),
    );
    this.watchdog.unref();
  }

  /** Whether the node is lost; the error that says how. */
  get lostWith(): TandemError | undefined {
    return this.lost;
  }

  /** The HMAC of the cluster secret under `role` for `nonce` (other connections to the node prove the secret with it). */
  macFor(role: string, nonceText: string): string {
    return mac(this.secret, role, nonceText);
  }

  /** This end's address on the connection: an address of the coordinator the node reaches. */
  get localAddress(): string | undefined {
    return this.socket.localAddress;
  }

  /** This end's port of the control connection (what the node sees as the coordinator's). */
  get localPort(): number | undefined {
    return this.socket.localPort;
  }

  /** Milliseconds since anything came from the node. */
  get silentMs(): number {
    return Date.now() - this.lastSeen;
  }

  private lostError(why: string): TandemError {
    return new TandemError('CLUSTER_NODE_LOST', `${this.label} (${this.address}) ${why}`, {
      hint: 'the node process died or the network failed; check its log and restart it',
      details: { node: this.label, address: this.address },
    });
  }

  private fail(e: TandemError): void {
    clearInterval(this.watchdog);
    if (!this.lost) {
      this.lost = e;
      this.onLost(e);
    }
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(this.lost);
    }
    this.pending.clear();
  }

  /**
   * Connects and authenticates (both ways) within `timeoutMs`. `onBusy` hears, at once, that
   * the node serves another coordinator first (the connection then waits for its turn).
   */
  static async connect(
    address: string,
    secret: string,
    label: string,
    timeoutMs: number,
    deadAfterMs = silenceLimitMs(),
    onBusy?: (busy: NodeBusy) => void,
  ): Promise<ControlClient> {
    const { host, port } = parseHostPort(address, 'node address');
    const socket = connect({ host, port });
    return ControlClient.handshake(
      socket,
      address,
      secret,
      label,
      timeoutMs,
      deadAfterMs,
      (e) =>
        new TandemError('CLUSTER_NODE_LOST', `cannot reach ${label} at ${address}: ${e.message}`, {
          hint: 'start `tandem node --listen` there, or fix the hostfile',
          details: { address },
        }),
      onBusy,
    );
  }

  /**
   * The coordinator's side of the handshake on a connection to a node, whichever side opened
   * it (a node that joins dials the coordinator): answer the node's challenge, check its
   * answer to ours. Settles within `timeoutMs`; on failure the socket is destroyed.
   */
  static handshake(
    socket: Socket,
    address: string,
    secret: string,
    label: string,
    timeoutMs: number,
    deadAfterMs: number = silenceLimitMs(),
    unreachable: (e: Error) => TandemError = (e) =>
      new TandemError('CLUSTER_NODE_LOST', `${label} at ${address}: ${e.message}`, {
        hint: 'the node went away during the handshake',
      }),
    onBusy?: (busy: NodeBusy) => void,
  ): Promise<ControlClient> {
    socket.setNoDelay(true);
    return new Promise((resolve, reject) => {
      const mine = nonce();
      let client: ControlClient | undefined;
      // set when the node said it serves another coordinator first (it takes one at a time)
      let busy: NodeBusy | undefined;
      const timer = setTimeout(
        () =>
          done(
            busy
              ? new TandemError(
                  'CLUSTER_NODE_BUSY',
                  `${servesAnother(busy)} and takes one at a time; it was not free within ${timeoutMs} ms`,
                  {
                    hint: 'wait for that run to end or stop it, or leave this node out',
                    details: { node: label, address, busyWith: busy.from, since: busy.since },
                  },
                )
              : new TandemError(
                  'CLUSTER_TIMEOUT',
                  `${label} at ${address} did not complete the handshake within ${timeoutMs} ms`,
                  { hint: 'check that `tandem node` runs there and the port is reachable' },
                ),
          ),
        timeoutMs,
      );
      const done = (e: unknown): void => {
        clearTimeout(timer);
        if (client) return;
        socket.destroy();
        reject(e);
      };
      const onError = (e: Error): void => done(unreachable(e));
      socket.on('error', onError);
      let stage = 0;
      readMessages(
        socket,
        (m) => {
          if (client) return client.dispatch(m);
          if (stage === 0 && m.type === 'challenge' && typeof m.nonce === 'string') {
            if (m.version !== PROTOCOL_VERSION)
              return done(
                new TandemError(
                  'CLUSTER_PROTOCOL',
                  `${label} at ${address} speaks control protocol ${String(m.version)}; this tandem speaks ${PROTOCOL_VERSION}`,
                  { hint: 'run the same tandem version on the coordinator and every node' },
                ),
              );
            stage = 1;
            send(socket, {
              type: 'auth',
              mac: mac(secret, 'coordinator', m.nonce),
              nonce: mine,
              version: PROTOCOL_VERSION,
            });
          } else if (
            stage === 1 &&
            m.type === 'busy' &&
            typeof m.from === 'string' &&
            typeof m.since === 'number'
          ) {
            busy = { label, address, from: m.from, since: m.since };
            onBusy?.(busy);
          } else if (stage === 1 && m.type === 'welcome' && sameMac(m.mac, mac(secret, 'node', mine))) {
            clearTimeout(timer);
            socket.off('error', onError);
            client = new ControlClient(
              socket,
              address,
              label,
              (m.info ?? {}) as Message,
              deadAfterMs,
              secret,
            );
            resolve(client);
          } else {
            done(
              new TandemError(
                'CLUSTER_AUTH',
                `${label} at ${address} failed the handshake (${String(m.type)})`,
                { hint: 'use the same --secret-file (or TANDEM_SECRET) on every node and the coordinator' },
              ),
            );
          }
        },
        (why) => {
          if (client) return client.fail(client.lostError(why));
          done(
            new TandemError('CLUSTER_PROTOCOL', `${label} at ${address}: ${why}`, {
              hint: 'is that port a tandem node?',
            }),
          );
        },
      );
      socket.on('close', () =>
        done(
          new TandemError(
            'CLUSTER_AUTH',
            `${label} at ${address} closed the connection during the handshake`,
            { hint: 'use the same --secret-file (or TANDEM_SECRET) everywhere' },
          ),
        ),
      );
    });
  }

  /** Bytes written to / read from the node's control connection so far. */
  get controlBytes(): { sent: number; received: number } {
    return { sent: this.socket.bytesWritten, received: this.socket.bytesRead };
  }

  private dispatch(m: Message): void {
    this.lastSeen = Date.now();
    if (typeof m.id !== 'number') {
      if (m.event === 'heartbeat') this.heard(m);
      else this.onEvent(m);
      return;
    }
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    clearTimeout(p.timer);
    if (m.ok === true) p.resolve((m.result ?? {}) as Message);
    else p.reject(errorFromJson(m.error, this.label, this.address));
  }

  /** A heartbeat: its figures checked at this edge (malformed ones close the connection and change nothing). */
  private heard(m: Message): void {
    let figures: NodeFigures | undefined;
    try {
      figures = parseFigures(m.figures);
    } catch (e) {
      if (!(e instanceof MalformedMessage)) throw e;
      this.fail(this.lostError(`sent a malformed message: ${e.message}`));
      this.socket.destroy();
      return;
    }
    this.previousHeartbeat = this.heartbeat;
    const { sent, received } = this.controlBytes;
    this.heartbeat = { atMs: Date.now(), figures, controlSent: sent, controlReceived: received };
  }

  /** Sends a request and waits for its reply, at most `timeoutMs`. */
  request(type: string, body: Message, timeoutMs: number): Promise<Message> {
    if (this.lost) return Promise.reject(this.lost);
    const id = this.nextId++;
    const holds = !RESPONSIVE.has(type);
    if (holds) this.holding++;
    const sentAt = performance.now();
    const settled = (): void => {
      if (QUICK.has(type)) this.bestRttMs = Math.min(this.bestRttMs ?? Infinity, performance.now() - sentAt);
      if (holds) {
        this.holding--;
        this.lastSeen = Date.now();
      }
    };
    return new Promise<Message>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(
          new TandemError(
            'CLUSTER_TIMEOUT',
            `${this.label} (${this.address}) did not answer '${type}' within ${timeoutMs} ms`,
            {
              hint: 'the node is overloaded or stuck; raise --timeout or check its log',
              details: { node: this.label, address: this.address, request: type },
            },
          ),
        );
      }, timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      send(this.socket, { ...body, id, type });
    }).finally(settled);
  }

  /** Sends a message the node handles at once, beside the request it runs (no reply awaited). */
  notify(type: string, body: Message): void {
    if (!this.lost) send(this.socket, { ...body, type });
  }

  close(): void {
    clearInterval(this.watchdog);
    this.socket.end();
    this.socket.destroy();
  }
}
