import { createServer, type Server } from 'node:net';
import { TandemError } from '../errors/index.js';
import type { HostEntry } from './hostfile.js';
import { ControlClient, parseHostPort, type Message } from './protocol.js';

/** Where members join: `tandem serve --cluster HOST:PORT` listens here; the default port. */
export const CLUSTER_PORT = 7110;

/**
 * The coordinator's cluster port: nodes started with `tandem node --join HOST:PORT` dial it.
 * Each connection is authenticated both ways on the cluster secret (the node challenges, as a
 * listening node does) and asked `hello`; then `onMember` gets it. A connection that fails
 * the handshake is closed and changes nothing.
 */
export class ClusterPort {
  private constructor(
    private readonly server: Server,
    readonly address: string,
  ) {}

  static async listen(
    listen: string,
    secret: string,
    onMember: (client: ControlClient, host: HostEntry, info: Message) => void,
    log: (line: string) => void = () => {},
  ): Promise<ClusterPort> {
    const { host, port } = parseHostPort(listen, '--cluster');
    let joined = 0;
    const server = createServer((socket) => {
      // the address other members reach this one's fabric at: its address as seen from here
      const remote = (socket.remoteAddress ?? '127.0.0.1').replace(/^::ffff:/, '');
      const address = `${remote.includes(':') ? `[${remote}]` : remote}:${socket.remotePort ?? 0}`;
      const label = `member ${joined++}`;
      ControlClient.handshake(socket, address, secret, label, 10_000)
        .then(async (client) => {
          const info = await client.request('hello', {}, 10_000);
          const memLimit = typeof info.memLimit === 'number' ? info.memLimit : undefined;
          onMember(client, { address, ...(memLimit !== undefined ? { memLimit } : {}) }, info);
        })
        .catch((e: unknown) => log(`refused a member at ${address}: ${(e as Error).message}`));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', (e) =>
        reject(
          new TandemError('CLUSTER_SPAWN', `cannot listen for members on ${listen}: ${e.message}`, {
            hint: `pick a free port (the default is ${CLUSTER_PORT}) or another address`,
          }),
        ),
      );
      server.listen(port, host, () => resolve());
    });
    const a = server.address();
    return new ClusterPort(server, typeof a === 'object' && a ? `${host}:${a.port}` : listen);
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
