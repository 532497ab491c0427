import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { serve, withSpeed, type NodeAgentOptions } from './node-agent.js';
import { parseHostPort } from './protocol.js';

/** How long a joining node waits between dials of an unreachable (or restarted) coordinator. */
export const REJOIN_MS = 1000;

export type JoinOptions = Omit<NodeAgentOptions, 'listen' | 'once'> & {
  /** The coordinator's cluster port (`tandem serve --cluster HOST:PORT`). */
  join: string;
};

/**
 * `tandem node --join HOST:PORT`: dials the coordinator's cluster port and serves it as a
 * listening node serves the coordinators that dial it (the same handshake, with the node
 * challenging, and the same requests). When the session ends (the coordinator stopped, was
 * silent for 3 s, or dropped this member) the node frees what it held and dials again every
 * REJOIN_MS, so a restarted coordinator claims it again. `stop` ends the loop and the session.
 */
export async function joinCluster(options: JoinOptions): Promise<{ stop: () => void; done: Promise<void> }> {
  const o = await withSpeed(options);
  const { host, port } = parseHostPort(o.join, '--join');
  let stopped = false;
  let current: ReturnType<typeof connect> | undefined;
  let reachable = true;
  const once = (): Promise<void> =>
    new Promise<void>((resolve) => {
      const socket = (current = connect({ host, port }));
      let began = false;
      socket.once('connect', () => {
        reachable = true;
        o.log?.(`connected to the coordinator at ${o.join}`);
        serve(socket, o, (start) => {
          began = true;
          start(() => resolve());
        });
      });
      socket.once('error', (e) => {
        if (reachable)
          o.log?.(`cannot reach the coordinator at ${o.join} (${e.message}); trying every ${REJOIN_MS} ms`);
        reachable = false;
      });
      // a session resolves once it has freed its model (serve's done), anything else on close
      socket.once('close', () => {
        if (!began) resolve();
      });
    });
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
