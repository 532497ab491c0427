import { TandemError } from '../errors/index.js';
import {
  parallelKinds,
  parseBytes,
  wireFormats,
  type ParallelKind,
  type WireFormat,
} from '../parallel/index.js';
import type { ProviderName } from '../fabric/index.js';
import { checkClusterLimits, clusterLimitsHelp } from '../cluster/cluster-limits.js';
import { checkInteger } from './checks.js';
import type { OptionTable } from './options.js';

/** The options with which a command splits a model across node processes (src/cluster). */
export const clusterOptions = {
  nodes: {
    type: 'number',
    description: `split the model across N local node processes (see docs/parallel.md); ${clusterLimitsHelp}`,
  },
  hosts: {
    type: 'string',
    description:
      'split the model across the nodes of a hostfile, each running `tandem node`: host:port [mem=8G] [speed=1] per line, or an MLX JSON hostfile; ' +
      'on slow or emulated machines raise TANDEM_CLUSTER_SILENCE_MS here and on every node (see --nodes)',
    placeholder: 'FILE',
  },
  parallel: {
    type: 'string',
    description:
      'how --nodes/--hosts split the model; auto: the split a cost model of memory, speed and links prefers among those that fit (default: tp for run, auto for serve)',
    choices: [...parallelKinds, 'auto'],
  },
  tp: {
    type: 'number',
    description: 'with --parallel hybrid: nodes per tensor-parallel group, a positive integer (default 2)',
  },
  provider: {
    type: 'string',
    description:
      'with --nodes/--hosts: fabric between nodes (default shm for --nodes, tcp for --hosts; rdma: a verbs device on every node, TANDEM_RDMA_DEVICE names one, see `tandem devinfo`)',
    choices: ['shm', 'tcp', 'rdma'],
  },
  wire: {
    type: 'string',
    description: 'with --nodes/--hosts: activations between nodes (default f32)',
    choices: wireFormats,
  },
} as const satisfies OptionTable;

export interface ClusterChoice {
  nodes?: number;
  hosts?: string;
  parallel?: ParallelKind | 'auto';
  tpSize?: number;
  provider?: ProviderName;
  wire?: WireFormat;
}

/**
 * The cluster options of `command`, checked once: --nodes and --hosts exclude each other, --tp
 * needs --parallel hybrid, and the others need one of them. Undefined when neither is given.
 */
export function clusterChoice(
  command: string,
  o: {
    nodes?: number | undefined;
    hosts?: string | undefined;
    parallel?: ParallelKind | 'auto' | undefined;
    tp?: number | undefined;
    provider?: 'shm' | 'tcp' | 'rdma' | undefined;
    wire?: WireFormat | undefined;
    /** serve --cluster: members join instead of being listed, and the split options apply to them. */
    cluster?: string | undefined;
  },
): ClusterChoice | undefined {
  const usage = (message: string, hint: string): TandemError =>
    new TandemError('CLI_USAGE', `${command}: ${message}`, { hint });
  // before anything starts: a malformed limit would otherwise surface inside a connection handler
  if (o.nodes !== undefined || o.hosts !== undefined || o.cluster !== undefined) checkClusterLimits();
  if (o.nodes !== undefined && o.hosts !== undefined)
    throw usage(
      '--nodes and --hosts both given',
      'pass --nodes N to start local node processes, or --hosts FILE to use nodes started with `tandem node`, not both',
    );
  if (o.nodes !== undefined) checkInteger(command, 'nodes', o.nodes, 1, 64, 2);
  if (o.tp !== undefined) checkInteger(command, 'tp', o.tp, 1, 64, 2);
  if (o.tp !== undefined && o.parallel !== 'hybrid')
    throw usage(`--tp ${o.tp} needs --parallel hybrid`, 'add --parallel hybrid, or drop --tp');
  if (o.nodes === undefined && o.hosts === undefined) {
    if (o.cluster !== undefined) return undefined;
    const given = (['parallel', 'wire', 'provider'] as const).filter((k) => o[k] !== undefined);
    if (given.length > 0)
      throw usage(
        `${given.map((k) => `--${k}`).join(', ')} ${given.length > 1 ? 'apply' : 'applies'} only with --nodes or --hosts`,
        `add --nodes N (local node processes) or --hosts FILE${o.cluster === undefined && command === 'serve' ? ' (or --cluster HOST:PORT)' : ''}, or drop them to run on this machine`,
      );
    return undefined;
  }
  return {
    ...(o.nodes !== undefined ? { nodes: o.nodes } : { hosts: o.hosts as string }),
    ...(o.parallel !== undefined ? { parallel: o.parallel } : {}),
    ...(o.tp !== undefined ? { tpSize: o.tp } : {}),
    ...(o.provider !== undefined ? { provider: o.provider } : {}),
    ...(o.wire !== undefined ? { wire: o.wire } : {}),
  };
}

/** --mem-limit as bytes: a typed error names the option when it is not a byte size. */
export function memLimitOption(command: string, text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const bytes = parseBytes(text);
  if (bytes === undefined || bytes < 1)
    throw new TandemError('CLI_USAGE', `${command}: --mem-limit '${text}' is not a byte size`, {
      hint: 'for example --mem-limit 8G',
    });
  return bytes;
}
