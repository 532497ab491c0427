import { TandemError } from '../errors/index.js';

/**
 * The cluster's two liveness limits that depend on how fast the machines are, each with its
 * environment variable for machines slower than the defaults assume (a loaded host, software
 * emulation such as the soft-RoCE guest of test/rdma): the silence after which a peer is lost,
 * and how long `--nodes` waits for each local node it starts. Read when used, so a coordinator
 * and the nodes it starts (which inherit its environment) agree; on a hostfile's hosts each
 * `tandem node` reads its own. Unset or empty: the default.
 */

/** A peer from which nothing came for this long (ms) is lost; default DEFAULT_SILENCE_MS. */
export const SILENCE_ENV = 'TANDEM_CLUSTER_SILENCE_MS';
/** `--nodes` waits this long (ms) for each local node to listen; default DEFAULT_NODE_START_MS. */
export const NODE_START_ENV = 'TANDEM_NODE_START_MS';

/**
 * Two and a half heartbeats (HEARTBEAT_MS, 1 s): with the silence watch's tick (at most 250
 * ms) a stopped peer is declared dead within 3 s.
 */
export const DEFAULT_SILENCE_MS = 2500;
/** A node process starts within seconds on a loaded machine; a minute leaves room for more. */
export const DEFAULT_NODE_START_MS = 60_000;

/** Below this a silence limit would judge a peer between two heartbeats. */
const MIN_SILENCE_MS = 1500;
/** A day: beyond it a limit is a mistake (and past setTimeout's range). */
const MAX_MS = 86_400_000;

function envMs(name: string, fallback: number, min: number): number {
  const text = process.env[name];
  if (text === undefined || text.trim() === '') return fallback;
  const ms = Number(text);
  if (!Number.isInteger(ms) || ms < min || ms > MAX_MS) {
    throw new TandemError(
      'CLI_USAGE',
      `${name}=${text} is not a whole number of milliseconds from ${min} to ${MAX_MS}`,
      {
        hint: `unset it for the default (${fallback} ms), or give e.g. ${name}=${fallback * 8} on a slow or emulated machine`,
        details: { name, value: text },
      },
    );
  }
  return ms;
}

/** TANDEM_CLUSTER_SILENCE_MS, else DEFAULT_SILENCE_MS; a malformed value is CLI_USAGE naming it. */
export function silenceLimitMs(): number {
  return envMs(SILENCE_ENV, DEFAULT_SILENCE_MS, MIN_SILENCE_MS);
}

/** TANDEM_NODE_START_MS, else DEFAULT_NODE_START_MS; a malformed value is CLI_USAGE naming it. */
export function nodeStartMs(): number {
  return envMs(NODE_START_ENV, DEFAULT_NODE_START_MS, 1000);
}

/** Both limits read once, so a command refuses a malformed value before it starts anything. */
export function checkClusterLimits(): void {
  silenceLimitMs();
  nodeStartMs();
}

/** For --help: the two variables, what they do and their defaults. */
export const clusterLimitsHelp =
  `on slow or emulated machines ${SILENCE_ENV} (default ${DEFAULT_SILENCE_MS}; set it on every host) raises the silence after which a node or coordinator is lost, ` +
  `and ${NODE_START_ENV} (default ${DEFAULT_NODE_START_MS}) how long --nodes waits for each node to start`;
