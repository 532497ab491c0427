import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { TandemError } from '../../errors/index.js';
import { mac, macEqual } from './secret.js';

/*
 * Link measurement over an authenticated TCP connection to the neighbour's agent:
 *   server -> client: 16-byte nonce
 *   client -> server: HMAC(secret, 'tandem-measure', nonce), then one op byte:
 *     'P' ping: each byte the client sends is echoed (round trips for latency)
 *     'B' bulk: u64 length, then that many bytes; the server answers 'D' when all arrived
 *     'W' who:  the server answers its host name and closes (used to check a new address)
 * An unauthenticated client is dropped before any op is read.
 */

const nonceBytes = 16;

/** Reads exact byte counts from a socket; every read fails once the socket closes or errors. */
class Reader {
  private chunks: Buffer[] = [];
  private size = 0;
  private waiter: (() => void) | undefined;
  private failure: Error | undefined;
  constructor(socket: net.Socket) {
    socket.on('data', (d: Buffer) => {
      this.chunks.push(d);
      this.size += d.length;
      this.waiter?.();
    });
    const fail = (e?: Error): void => {
      this.failure ??= e ?? new Error('connection closed');
      this.waiter?.();
    };
    socket.on('error', fail);
    socket.on('close', () => fail());
  }
  async read(n: number): Promise<Buffer> {
    while (this.size < n) {
      if (this.failure) throw this.failure;
      await new Promise<void>((resolve) => (this.waiter = resolve));
      this.waiter = undefined;
    }
    const all = Buffer.concat(this.chunks);
    this.chunks = all.length > n ? [all.subarray(n)] : [];
    this.size = all.length - n;
    return all.subarray(0, n);
  }
  /** Discards `n` bytes without keeping them (bulk transfer). */
  async skip(n: number): Promise<void> {
    let left = n;
    while (left > 0) {
      if (this.size === 0) {
        if (this.failure) throw this.failure;
        await new Promise<void>((resolve) => (this.waiter = resolve));
        this.waiter = undefined;
        continue;
      }
      const head = this.chunks[0] as Buffer;
      if (head.length <= left) {
        this.chunks.shift();
        left -= head.length;
        this.size -= head.length;
      } else {
        this.chunks[0] = head.subarray(left);
        this.size -= left;
        left = 0;
      }
    }
  }
}

async function serve(socket: net.Socket, secret: Buffer, host: string): Promise<void> {
  const reader = new Reader(socket);
  const nonce = randomBytes(nonceBytes);
  socket.write(nonce);
  const proof = await reader.read(32);
  if (!macEqual(proof, mac(secret, 'tandem-measure', nonce))) {
    socket.destroy();
    return;
  }
  const op = (await reader.read(1)).toString();
  if (op === 'W') {
    socket.end(host);
  } else if (op === 'P') {
    for (;;) socket.write(await reader.read(1));
  } else if (op === 'B') {
    const length = Number((await reader.read(8)).readBigUInt64LE());
    await reader.skip(length);
    socket.write('D');
  } else socket.destroy();
}

/** The measurement server of one agent; listens on every address (IPv6 and IPv4) of `port`. */
export async function startMeasureServer(port: number, secret: Buffer, host: string): Promise<net.Server> {
  const server = net.createServer((socket) => {
    socket.setNoDelay(true);
    socket.setTimeout(10_000, () => socket.destroy());
    serve(socket, secret, host).catch(() => socket.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port, host: '::' }, () => resolve());
  });
  return server;
}

function timeout(what: string, address: string, ms: number): TandemError {
  return new TandemError('TIMEOUT', `${what} with ${address} did not finish within ${ms} ms`, {
    hint: 'check the cable and that the agent on the other host runs with the same cluster secret',
    details: { address, ms },
  });
}

/** Opens an authenticated connection, runs `body`, and closes; the whole exchange has one deadline. */
async function withConnection<T>(
  address: string,
  port: number,
  secret: Buffer,
  ms: number,
  what: string,
  body: (s: net.Socket, r: Reader) => Promise<T>,
): Promise<T> {
  const socket = net.connect({ host: address, port });
  socket.setNoDelay(true);
  const reader = new Reader(socket);
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(timeout(what, address, ms)), ms);
  });
  try {
    return await Promise.race([
      (async () => {
        const nonce = await reader.read(nonceBytes);
        socket.write(mac(secret, 'tandem-measure', nonce));
        return body(socket, reader);
      })(),
      deadline,
    ]);
  } finally {
    clearTimeout(timer);
    socket.destroy();
  }
}

export interface LinkFigures {
  latencyUs: number;
  bandwidthGBps: number;
}

/** One-way latency (median of `pings` round trips, halved) and bulk bandwidth over one link. */
export async function measureLink(
  address: string,
  port: number,
  secret: Buffer,
  opts: { pings?: number; bytes?: number; timeoutMs?: number } = {},
): Promise<LinkFigures> {
  const pings = opts.pings ?? 20;
  const bytes = opts.bytes ?? 4 << 20;
  const ms = opts.timeoutMs ?? 5000;
  const latencyUs = await withConnection(address, port, secret, ms, 'latency measurement', async (s, r) => {
    s.write('P');
    const rtts: number[] = [];
    for (let i = 0; i < pings; i++) {
      const t0 = process.hrtime.bigint();
      s.write('x');
      await r.read(1);
      rtts.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
    rtts.sort((a, b) => a - b);
    return (rtts[Math.floor(rtts.length / 2)] as number) / 2;
  });
  // Best of two transfers: the first often pays for JIT warm-up and slow-start.
  let bandwidthGBps = 0;
  for (let round = 0; round < 2; round++)
    bandwidthGBps = Math.max(bandwidthGBps, await bulk(address, port, secret, bytes, ms));
  return { latencyUs, bandwidthGBps };
}

async function bulk(
  address: string,
  port: number,
  secret: Buffer,
  bytes: number,
  ms: number,
): Promise<number> {
  return withConnection(address, port, secret, ms, 'bandwidth measurement', async (s, r) => {
    const head = Buffer.alloc(9);
    head.write('B');
    head.writeBigUInt64LE(BigInt(bytes), 1);
    const chunk = Buffer.alloc(Math.min(bytes, 1 << 20));
    const t0 = process.hrtime.bigint();
    s.write(head);
    for (let sent = 0; sent < bytes; sent += chunk.length) {
      const part = chunk.subarray(0, Math.min(chunk.length, bytes - sent));
      if (!s.write(part)) await new Promise((resolve) => s.once('drain', resolve));
    }
    await r.read(1);
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    return bytes / seconds / 1e9;
  });
}

/** Asks the agent at `address` for its host name (after authenticating): proves a new address reaches the right host. */
export async function whoIs(
  address: string,
  port: number,
  secret: Buffer,
  timeoutMs = 3000,
): Promise<string> {
  return withConnection(address, port, secret, timeoutMs, 'host check', async (s, r) => {
    s.write('W');
    const parts: Buffer[] = [];
    for (;;) {
      try {
        parts.push(await r.read(1));
      } catch {
        return Buffer.concat(parts).toString('utf8'); // the server closes after the name
      }
    }
  });
}
