import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { TandemError, errorCodes, type ErrorCode } from '../errors/index.js';

/**
 * The control channel between a coordinator and a node: newline-delimited JSON over TCP,
 * opened by a mutual challenge-response on the cluster secret (HMAC-SHA256), so nothing is
 * accepted from a peer that does not hold the secret. Requests carry an id; replies echo it;
 * events (no id) stream progress such as generated tokens.
 */
export type Message = Record<string, unknown>;

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
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    buffered += chunk;
    if (buffered.length > MAX_LINE) {
      onBad(`a control message exceeds ${MAX_LINE} bytes`);
      return;
    }
    let nl: number;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      let parsed: unknown;
      try {
        parsed = JSON.parse(line);
      } catch {
        onBad('a control message is not JSON');
        return;
      }
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
        onBad('a control message is not a JSON object');
        return;
      }
      onMessage(parsed as Message);
    }
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

/** The coordinator's end of one node's control channel. */
export class ControlClient {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private lost: TandemError | undefined;
  /** Events from the node (tokens, listening addresses). */
  onEvent: (m: Message) => void = () => {};

  private constructor(
    private readonly socket: Socket,
    readonly address: string,
    readonly label: string,
    readonly info: Message,
  ) {
    socket.on('close', () => this.fail(this.lostError('closed its control connection')));
    socket.on('error', (e) => this.fail(this.lostError(`control connection error: ${e.message}`)));
  }

  private lostError(why: string): TandemError {
    return new TandemError('CLUSTER_NODE_LOST', `${this.label} (${this.address}) ${why}`, {
      hint: 'the node process died or the network failed; check its log and restart it',
      details: { node: this.label, address: this.address },
    });
  }

  private fail(e: TandemError): void {
    this.lost ??= e;
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(this.lost);
    }
    this.pending.clear();
  }

  /** Connects and authenticates (both ways) within `timeoutMs`. */
  static async connect(
    address: string,
    secret: string,
    label: string,
    timeoutMs: number,
  ): Promise<ControlClient> {
    const { host, port } = parseHostPort(address, 'node address');
    return new Promise((resolve, reject) => {
      const socket = connect({ host, port });
      socket.setNoDelay(true);
      const mine = nonce();
      const timer = setTimeout(
        () =>
          done(
            new TandemError(
              'CLUSTER_TIMEOUT',
              `${label} at ${address} did not complete the handshake within ${timeoutMs} ms`,
              { hint: 'check that `tandem node` runs there and the port is reachable' },
            ),
          ),
        timeoutMs,
      );
      const done = (e: unknown, client?: ControlClient): void => {
        clearTimeout(timer);
        if (e) {
          socket.destroy();
          reject(e);
        } else resolve(client as ControlClient);
      };
      socket.on('error', (e) =>
        done(
          new TandemError('CLUSTER_NODE_LOST', `cannot reach ${label} at ${address}: ${e.message}`, {
            hint: 'start `tandem node --listen` there, or fix the hostfile',
            details: { address },
          }),
        ),
      );
      let stage = 0;
      readMessages(
        socket,
        (m) => {
          if (stage === 0 && m.type === 'challenge' && typeof m.nonce === 'string') {
            stage = 1;
            send(socket, { type: 'auth', mac: mac(secret, 'coordinator', m.nonce), nonce: mine });
          } else if (stage === 1 && m.type === 'welcome' && sameMac(m.mac, mac(secret, 'node', mine))) {
            stage = 2;
            socket.removeAllListeners('error');
            socket.removeAllListeners('data');
            const client = new ControlClient(socket, address, label, (m.info ?? {}) as Message);
            readMessages(
              socket,
              (x) => client.dispatch(x),
              (why) => client.fail(client.lostError(why)),
            );
            done(undefined, client);
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
        (why) =>
          done(
            new TandemError('CLUSTER_PROTOCOL', `${label} at ${address}: ${why}`, {
              hint: 'is that port a tandem node?',
            }),
          ),
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

  private dispatch(m: Message): void {
    if (typeof m.id !== 'number') {
      this.onEvent(m);
      return;
    }
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    clearTimeout(p.timer);
    if (m.ok === true) p.resolve((m.result ?? {}) as Message);
    else p.reject(errorFromJson(m.error, this.label, this.address));
  }

  /** Sends a request and waits for its reply, at most `timeoutMs`. */
  request(type: string, body: Message, timeoutMs: number): Promise<Message> {
    if (this.lost) return Promise.reject(this.lost);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(
          new TandemError(
            'CLUSTER_TIMEOUT',
            `${this.label} did not answer '${type}' within ${timeoutMs} ms`,
            {
              hint: 'the node is overloaded or stuck; raise --timeout or check its log',
              details: { node: this.label, request: type },
            },
          ),
        );
      }, timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      send(this.socket, { ...body, id, type });
    });
  }

  close(): void {
    this.socket.end();
    this.socket.destroy();
  }
}
