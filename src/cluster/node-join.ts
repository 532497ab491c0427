import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { discoverCluster } from './cluster-discovery.js';
import { serve, withSpeed, type NodeAgentOptions } from './node-agent.js';
import { parseHostPort } from './protocol.js';

/** How long a joining node waits between dials of an unreachable (or restarted) coordinator. */
export const REJOIN_MS = 1000;

export type JoinOptions = Omit<NodeAgentOptions, 'listen' | 'once'> & {
  /** The coordinator's cluster port (`tandem serve --cluster HOST:PORT`); without it the node finds it by discovery. */
  join?: string;
  /** Discovery's UDP port (default DISCOVERY_PORT) and, for tests, unicast targets probed besides the multicast group. */
  discover?: { port?: number; targets?: readonly string[] };
};

/**
 * `tandem node --join HOST:PORT` (or `--discover`: the address comes from the coordinator's
 * answer to a discovery probe, asked again before every dial, so a coordinator that moved
 * is found): dials the coordinator's cluster port and serves it as a
 * listening node serves the coordinators that dial it (the same handshake, with the node
 * challenging, and the same requests). When the session ends (the coordinator stopped, was
 * silent for 3 s, or dropped this member) the node frees what it held and dials again every
 * REJOIN_MS, so a restarted coordinator claims it again. `stop` ends the loop and the session.
 */
export async function joinCluster(options: JoinOptions): Promise<{ stop: () => void; done: Promise<void> }> {
  const o = await withSpeed(options);
  if (o.join !== undefined) parseHostPort(o.join, '--join');
  let stopped = false;
  let current: ReturnType<typeof connect> | undefined;
  let reachable = true;
  let found = '';
  // the address to dial next: the given one, or the one discovery finds (undefined: none answered yet)
  const address = async (): Promise<string | undefined> => {
    if (o.join !== undefined) return o.join;
    try {
      const [first] = await discoverCluster({ secret: o.secret, timeoutMs: 2000, ...o.discover });
      if (first !== found) o.log?.(`discovered the coordinator at ${first}`);
      found = first ?? '';
      return first;
    } catch (e) {
      if (found !== 'none') o.log?.(`${(e as Error).message}; probing again`);
      found = 'none';
      return undefined;
    }
  };
  const once = async (): Promise<void> => {
    const to = await address();
    if (to === undefined || stopped) return;
    const { host, port } = parseHostPort(to, 'the coordinator address');
    return new Promise<void>((resolve) => {
      const socket = (current = connect({ host, port }));
      let began = false;
      socket.once('connect', () => {
        reachable = true;
        o.log?.(`connected to the coordinator at ${to}`);
        serve(socket, o, (start) => {
          began = true;
          start(() => resolve());
        });
      });
      socket.once('error', (e) => {
        if (reachable)
          o.log?.(`cannot reach the coordinator at ${to} (${e.message}); trying every ${REJOIN_MS} ms`);
        reachable = false;
      });
      // a session resolves once it has freed its model (serve's done), anything else on close
      socket.once('close', () => {
        if (!began) resolve();
      });
    });
  };
  const done = (async () => {
    while (!stopped) {
      await once();
      if (!stopped) await sleep(REJOIN_MS);
    }
  })();
  return {
    stop: () => {
      stopped = true;
      current?.destroy();
    },
    done,
  };
}
